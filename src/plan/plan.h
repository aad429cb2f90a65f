// ExecutionPlan: (policy, HostFacts) -> plan | refusal. Pure; the receipt records the plan verbatim.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "base/enum_names.h"
#include "base/error.h"
#include "base/json_util.h"
#include "plan/host_facts.h"
#include "policy/task_policy.h"

namespace airlock::plan {

#define AIRLOCK_PROFILES(X) X(Production, "production") X(Development, "development")
AIRLOCK_ENUM(Profile, AIRLOCK_PROFILES)

// Isolation level of an executor: host 0 < landlock 1 < namespaces 2 = container 2 < microvm 3.
int isolation_level(policy::ExecutorKind e);
// Whether a tier can serve a network door (code_network allowlist): only a tier that cuts the
// network (a network namespace of its own) can. The host executor has the whole network instead.
bool can_have_door(policy::ExecutorKind e);

// Where a Landlock rule's path is anchored: the session's view, its scratch dir, or the host.
#define AIRLOCK_ANCHORS(X) X(View, "view") X(Scratch, "scratch") X(Host, "host")
AIRLOCK_ENUM(Anchor, AIRLOCK_ANCHORS)

// Landlock filesystem access groups, expanded to ABI rights when applied.
//   read:      read files, read directories
//   exec:      read + execute
//   write:     read + write/create/remove/rename/truncate (as far as the ABI has them)
//   dev_write: read + write files (no create/remove), ioctl on devices
#define AIRLOCK_ACCESSES(X) X(Read, "read") X(Exec, "exec") X(Write, "write") X(DevWrite, "dev_write")
AIRLOCK_ENUM(Access, AIRLOCK_ACCESSES)

struct FsRule {
  Anchor anchor;
  std::string path;  // absolute for Host, relative (or ".") for View/Scratch
  Access access;
  bool optional = false;  // a Host path that may not exist on every machine
};

// The Landlock tier's floor: signal and abstract-socket scoping (ABI 6). The command shares the
// host's pid space and sockets there, and no other wall can scope a kill(2) by pid (a shell signals
// its own children by pid too): below ABI 6 it could signal its own supervisor or any process of
// its uid. The namespaces tier, whose pid and net namespaces scope both, uses Landlock from ABI 3
// as a second wall.
inline constexpr int kLandlockTierAbiFloor = 6;
inline constexpr int kLandlockInnerAbiFloor = 3;

struct LandlockPlan {
  int abi_floor = kLandlockInnerAbiFloor;  // below this the tier refuses
  int abi_measured = 0;  // what the probe saw; re-checked when applied
  std::vector<FsRule> fs_rules;
  bool restrict_tcp = false;       // ABI >= 4: TCP bind/connect only as tcp_connect_ports say
  std::vector<int> tcp_connect_ports;  // with restrict_tcp: the only ports connect(2) may reach (the door)
  bool scope_abstract_unix = false;  // ABI >= 6
  bool scope_signal = false;         // ABI >= 6
  bool restrict_ioctl_dev = false;   // ABI >= 5
};

struct SeccompPlan {
  std::vector<std::string> denied_syscalls;  // fail with EPERM
  bool only_unix_sockets = false;            // socket(2) with any family but AF_UNIX fails
  // socket(2) fails for every family; socketpair(2) still works. The Landlock tier needs it:
  // up to ABI 7 Landlock does not check connect(2) to a pathname unix socket, so any host
  // daemon socket the uid may write (ssh-agent, docker.sock, D-Bus) would be reachable.
  bool no_sockets = false;
  std::vector<std::string> denied_ioctls;    // TIOCSTI, TIOCLINUX
  bool deny_namespace_clone = true;          // clone with CLONE_NEW*; clone3 -> ENOSYS
  // Calls that name a process (or a process group, or a user's processes) and change or read it:
  // they work on the caller itself (pid 0, or PRIO_PROCESS / IOPRIO_WHO_PROCESS with who 0) and
  // fail with EPERM for any other target. Which argument names the target is linux/seccomp.cpp's
  // table; a name it does not know is an error, never skipped.
  std::vector<std::string> self_only_syscalls;
};

// The namespaces of the namespaces tier (and of QEMU on the microvm tier): a new root of read-only
// binds, the view at the workspace's own path, a fresh /proc, a minimal /dev, loopback only.
// Applied by the namespace's init before the command.
struct NamespacesPlan {
  std::vector<std::string> ro_binds;      // host directories and files, bound read-only at the same path
  std::vector<std::string> dev_nodes;     // host device nodes bound into a fresh /dev
  std::vector<std::string> proc_masked;   // /proc entries covered by /dev/null
  std::vector<std::string> proc_read_only;  // /proc subtrees made read-only
  std::vector<std::string> masked;        // host files (credentials) beneath a bind, covered by /dev/null
  std::string hostname = "airlock";
  bool loopback_only = true;
};

// The network door of a `code_network: allowlist` policy (namespaces tier): a listening socket made
// inside the sandbox's network namespace (which holds only loopback) and served by airlock outside
// it, an HTTP proxy that admits only what the rules admit. The command finds it in HTTP_PROXY,
// HTTPS_PROXY and ALL_PROXY (and their lower-case forms).
struct DoorPlan {
  std::string address = "127.0.0.1";
  int port = 3128;
  std::vector<policy::EgressRule> rules;  // the policy's code_network rules, as http_fetch checks egress
  std::string url() const;                // "http://127.0.0.1:3128"
  std::vector<std::string> environment() const;  // the proxy variables the command gets
};

// cgroup limits for a whole sandbox (every process in it together).
struct CgroupPlan {
  int version = 1;  // 1: one v1 hierarchy per controller; 2: one cgroup2 directory
  std::vector<std::string> controllers;  // memory, pids, cpu
  uint64_t memory_bytes = 0;             // with swap at zero
  uint64_t pids_max = 0;
  uint64_t cpu_quota_us = 0;             // per cpu_period_us: the CPU share of the sandbox
  uint64_t cpu_period_us = 100000;
};

// The microVM tier's guest: what QEMU boots and what it is given. QEMU itself runs confined by
// MicrovmTierPlan::qemu (a namespaces sandbox sized for QEMU), with its own -sandbox on.
struct MicrovmPlan {
  std::string qemu = "/usr/bin/qemu-system-x86_64";
  std::string acceleration;  // "kvm" | "tcg", as `airlock vm verify` measured by booting
  uint64_t memory_mb = 0;    // guest RAM: the policy's memory limit
  int vcpus = 1;
  std::string kernel, kernel_sha256, initramfs, initramfs_sha256;
  uint64_t tsc_khz = 0;
  uint64_t cpu_seconds = 0;  // RLIMIT_CPU of the command inside the guest
  // pids.max of the command's cgroup inside the guest (the guest agent's cgroup v2): the command
  // runs as the guest's root, which RLIMIT_NPROC does not bind.
  uint64_t max_processes = 0;
  // Guests booted ahead and kept waiting, each used for exactly one command (0: every command
  // boots its own). The operator's setting (`airlock serve --vm-pool N`), not the policy's.
  size_t pool = 0;
  // Test seam (AIRLOCK_TEST_GUEST_BOOT_DELAY_MS): the guest agent waits this long before it says
  // ready, as a slow boot would.
  uint64_t test_boot_delay_ms = 0;
};

// What QEMU may use on top of the guest's RAM (its own code, TCG's translation cache, 9p).
inline constexpr uint64_t kMicrovmOverheadMb = 256;

#define AIRLOCK_PROCESS_LIMIT_MECHANISMS(X) \
  X(RlimitNproc, "rlimit_nproc") X(CgroupV1Pids, "cgroup_v1_pids") X(CgroupV2Pids, "cgroup_v2_pids")
AIRLOCK_ENUM(ProcessLimitMechanism, AIRLOCK_PROCESS_LIMIT_MECHANISMS)

struct LimitsPlan {
  uint64_t memory_bytes = 0;        // RLIMIT_AS
  uint64_t cpu_seconds = 0;         // RLIMIT_CPU
  uint64_t max_processes = 0;
  ProcessLimitMechanism process_mechanism = ProcessLimitMechanism::RlimitNproc;
  uint64_t wall_timeout_ms = 0;     // SIGTERM at the limit,
  uint64_t kill_grace_ms = 2000;    // SIGKILL this long after
  uint64_t session_budget_ms = 0;   // the whole session's wall time; running out kills what runs
  uint64_t max_file_bytes = 0;      // RLIMIT_FSIZE; 0: no limit
  uint64_t max_open_files = 1024;   // RLIMIT_NOFILE
};

struct Candidate {
  policy::ExecutorKind executor;
  bool available = false;
  std::string reason;  // why not, or why chosen
};

// The tier plans: what each tier confines with, exactly. One alternative per tier this planner
// can plan, each holding the sections that tier always has and only those (an optional section is
// one the tier has on some hosts or for some policies), so a plan with an impossible combination,
// a door on the Landlock tier or a guest without QEMU's wall, cannot be built. `kKind` names the
// tier; exec's registry has an executor for each (exec::executors()).

// The host tier: no confinement at all (the development profile, or an agent tool's own sandbox
// under `confinement: vendor`). The command has the host's network and inherits capabilities.
struct HostTierPlan {
  static constexpr policy::ExecutorKind kKind = policy::ExecutorKind::Host;
};

// The landlock tier: a process of the host under Landlock and seccomp, every capability dropped.
// Its process count is limited by RLIMIT_NPROC, or for root by a pids cgroup per run (the
// plan's LimitsPlan says which). No door: it cannot cut the network.
struct LandlockTierPlan {
  static constexpr policy::ExecutorKind kKind = policy::ExecutorKind::Landlock;
  LandlockPlan landlock;
  SeccompPlan seccomp;
};

// What confines a command on the namespaces tier, and QEMU on the microvm tier: new namespaces and
// a root of read-only binds, cgroup limits for the sandbox as a whole, seccomp, and Landlock too
// where the kernel has ABI 3 or more (a second wall behind the mount namespace). Every capability
// is dropped.
struct NamespacesSandbox {
  NamespacesPlan namespaces;
  CgroupPlan cgroup;
  SeccompPlan seccomp;
  std::optional<LandlockPlan> landlock;
};

// The namespaces tier: the sandbox above and, for `code_network: allowlist`, the network door.
struct NamespacesTierPlan {
  static constexpr policy::ExecutorKind kKind = policy::ExecutorKind::Namespaces;
  NamespacesSandbox sandbox;
  std::optional<DoorPlan> door;  // the only way out; only this tier has one
};

// The microvm tier: the command in a guest kernel of its own; QEMU runs in a namespaces sandbox
// sized for QEMU (its cgroup holds the guest's RAM plus kMicrovmOverheadMb). No door: the guest
// has no network device.
struct MicrovmTierPlan {
  static constexpr policy::ExecutorKind kKind = policy::ExecutorKind::Microvm;
  MicrovmPlan guest;
  NamespacesSandbox qemu;
};

// The container tier's image and engine: what exec::ContainerExecutor hands the engine.
struct ContainerPlan {
  std::string engine;    // the engine's path, as the probe found it working ("/usr/bin/podman")
  std::string runtime;   // the OCI runtime that ran the probe's check ("crun" | "runc")
  bool rootless = false;  // the engine runs as this (non-root) user: its root is this user
  std::string image;     // NAME@sha256:... as the policy names it
  std::string image_id;  // sha256:...: the engine's content id of that image, what is run
  std::string workdir = "/work";  // where the view is, the only writable path besides /tmp
  uint64_t tmp_bytes = 64u << 20;  // the tmpfs at /tmp
};

// The container tier: the command in a fresh container of a pinned OCI image, run by a real
// engine as a one-shot and removed after its end is read (then checked gone). The container has
// no network device but loopback, a read-only root, the view at /work and the scratch directory
// at /tmp, every capability dropped, no_new_privs, airlock's seccomp filter (as an OCI profile),
// and the sandbox's cgroup limits (set by the engine as root; rootless, airlock's own cgroup). No
// door.
struct ContainerTierPlan {
  static constexpr policy::ExecutorKind kKind = policy::ExecutorKind::Container;
  ContainerPlan container;
  CgroupPlan cgroup;
  SeccompPlan seccomp;
  std::vector<std::string> read_only_paths;  // the policy's, bound read-only at the same path
};

using TierPlan = std::variant<HostTierPlan, LandlockTierPlan, NamespacesTierPlan, MicrovmTierPlan, ContainerTierPlan>;

// The tier a tier plan is for.
policy::ExecutorKind executor_of(const TierPlan& t);

// A tier plan's sections under the names the receipt gives them, null where the tier has none (on
// the microvm tier the sandbox, and its Landlock and seccomp, are QEMU's). For readers that show a
// plan whatever its tier (to_json, `airlock plan`); what applies a plan takes its alternative.
struct TierSections {
  const LandlockPlan* landlock = nullptr;
  const SeccompPlan* seccomp = nullptr;
  const NamespacesSandbox* sandbox = nullptr;
  const DoorPlan* door = nullptr;
  const MicrovmPlan* guest = nullptr;
  const CgroupPlan* cgroup = nullptr;  // the sandbox's, or the container tier's own
  const ContainerPlan* container = nullptr;
};
TierSections sections_of(const TierPlan& t);

// The tiers this build has an executor for, as exec's registry lists them (exec::built_tiers()):
// the planner refuses any other by name, before it reads a fact. The plan layer cannot see exec,
// so the list is passed in.
using BuiltTiers = std::span<const policy::ExecutorKind>;

struct ExecutionPlan {
  Profile profile = Profile::Production;
  int required_level = 1;
  std::string why;                       // the selection, in words
  std::vector<Candidate> considered;     // every tier tried, in order
  std::string policy_digest;
  std::vector<std::string> relaxations;  // named dangerous relaxations in use
  // The chosen tier and its confinement. A default plan is an empty Landlock plan (no rule grants
  // anything), never the host tier's none; the planner always sets it.
  TierPlan confinement{std::in_place_type<LandlockTierPlan>};
  LimitsPlan limits;
  std::vector<std::string> env_passthrough;  // host variables copied if set
  std::vector<std::string> view_paths;       // copied into the view (readable + write-back)
  std::vector<std::string> write_back_paths;
  std::vector<std::string> denied_names;               // absent from the view, never written back
  std::vector<policy::ProtectedPath> protected_paths;  // read-only in the view, never written back
  // The first of the two walls around protected paths (read-only inside the sandbox). Only a
  // test seam turns it off, to prove the second (write-back) holds alone; recorded as a relaxation.
  bool protected_first_wall = true;

  policy::ExecutorKind executor() const { return executor_of(confinement); }
  int tier() const { return isolation_level(executor()); }
  // Every capability dropped (effective, permitted, inheritable, ambient and the bounding set)
  // before the command runs, root included: on every tier but the host's.
  bool drops_capabilities() const { return !std::holds_alternative<HostTierPlan>(confinement); }
  // The host's network (the host tier); otherwise none, or only the door.
  bool host_network() const { return std::holds_alternative<HostTierPlan>(confinement); }
};

// The selection table of DESIGN.md plus the tier's concrete confinement, for the tiers `built`.
// Pure. Refusals: AIRLOCK_ISOLATION_POLICY_INVALID, AIRLOCK_EXECUTOR_UNAVAILABLE
// (facts.considered; a tier not in `built`, or one TierPlan has no alternative for, is such a
// candidate, by name), AIRLOCK_CONFINEMENT_BELOW_FLOOR.
Result<ExecutionPlan> plan_execution(const policy::TaskPolicy& policy, const HostFacts& facts,
                                     Profile profile, BuiltTiers built);

Json to_json(const ExecutionPlan& p);

// The facts plan_execution can look at for this policy: those of the executors it may try
// (auto's order, or the one named), limited to the tiers `built`. Pure.
FactNeeds fact_needs(const policy::TaskPolicy& policy, BuiltTiers built);

// Whether `executor` could run on `facts` at all, and if not why (used by doctor and plan). A
// tier not in `built` is unavailable: "no executor implements the container tier in this build".
Candidate assess(policy::ExecutorKind executor, const HostFacts& facts, Profile profile, BuiltTiers built);

}  // namespace airlock::plan
