// ExecutionPlan: (policy, HostFacts) -> plan | refusal. Pure; the receipt records the plan verbatim.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json_util.h"
#include "plan/host_facts.h"
#include "policy/task_policy.h"

namespace airlock::plan {

enum class Profile { Production, Development };
std::string_view to_string(Profile p);

// Isolation level of an executor: host 0 < landlock 1 < namespaces 2 = container 2 < microvm 3.
int isolation_level(policy::ExecutorKind e);
// Whether a tier can serve a network door (code_network allowlist): only a tier that cuts the
// network (a network namespace of its own) can. The host executor has the whole network instead.
bool can_have_door(policy::ExecutorKind e);

// Where a Landlock rule's path is anchored: the session's view, its scratch dir, or the host.
enum class Anchor { View, Scratch, Host };
std::string_view to_string(Anchor a);

// Landlock filesystem access groups, expanded to ABI rights when applied.
//   read:      read files, read directories
//   exec:      read + execute
//   write:     read + write/create/remove/rename/truncate (as far as the ABI has them)
//   dev_write: read + write files (no create/remove), ioctl on devices
enum class Access { Read, Exec, Write, DevWrite };
std::string_view to_string(Access a);

struct FsRule {
  Anchor anchor;
  std::string path;  // absolute for Host, relative (or ".") for View/Scratch
  Access access;
  bool optional = false;  // a Host path that may not exist on every machine
};

struct LandlockPlan {
  int abi_floor = 3;     // below this the tier refuses
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

// The namespaces tier: a new root of read-only binds, the view at the workspace's own path,
// a fresh /proc, a minimal /dev, loopback only. Applied by the namespace's init before the command.
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

// The microVM tier: the guest QEMU boots and what it is given. QEMU itself runs confined by this
// plan's namespaces, seccomp, Landlock and cgroup (sized for QEMU), with its own -sandbox on.
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

enum class ProcessLimitMechanism { RlimitNproc, CgroupV1Pids, CgroupV2Pids };
std::string_view to_string(ProcessLimitMechanism m);

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

struct ExecutionPlan {
  Profile profile = Profile::Production;
  policy::ExecutorKind executor = policy::ExecutorKind::Landlock;
  int tier = 1;
  int required_level = 1;
  std::string why;                       // the selection, in words
  std::vector<Candidate> considered;     // every tier tried, in order
  std::string policy_digest;
  std::vector<std::string> relaxations;  // named dangerous relaxations in use
  std::optional<LandlockPlan> landlock;
  std::optional<SeccompPlan> seccomp;
  std::optional<NamespacesPlan> namespaces;
  std::optional<CgroupPlan> cgroup;  // aggregate limits (namespaces tier; QEMU's on the microvm tier)
  std::optional<MicrovmPlan> microvm;
  std::optional<DoorPlan> door;      // code_network allowlist: the only way out
  LimitsPlan limits;
  // Every capability dropped (effective, permitted, inheritable, ambient and the bounding set)
  // before the command runs, root included: on every confining tier.
  bool drop_capabilities = false;
  std::vector<std::string> env_passthrough;  // host variables copied if set
  std::vector<std::string> view_paths;       // copied into the view (readable + write-back)
  std::vector<std::string> write_back_paths;
  std::vector<std::string> denied_names;               // absent from the view, never written back
  std::vector<policy::ProtectedPath> protected_paths;  // read-only in the view, never written back
  // The first of the two walls around protected paths (read-only inside the sandbox). Only a
  // test seam turns it off, to prove the second (write-back) holds alone; recorded as a relaxation.
  bool protected_first_wall = true;
  bool network = false;  // true: the host's network (host executor); false: none, or only the door
};

// The selection table of DESIGN.md plus the tier's concrete confinement. Pure.
// Refusals: AIRLOCK_ISOLATION_POLICY_INVALID, AIRLOCK_EXECUTOR_UNAVAILABLE (facts.considered),
// AIRLOCK_CONFINEMENT_BELOW_FLOOR.
Result<ExecutionPlan> plan_execution(const policy::TaskPolicy& policy, const HostFacts& facts,
                                     Profile profile);

Json to_json(const ExecutionPlan& p);

// The facts plan_execution can look at for this policy: those of the executors it may try
// (auto's order, or the one named), limited to executors this build can apply. Pure.
FactNeeds fact_needs(const policy::TaskPolicy& policy);

// Whether `executor` could run on `facts` at all, and if not why (used by doctor and plan).
Candidate assess(policy::ExecutorKind executor, const HostFacts& facts, Profile profile);

}  // namespace airlock::plan
