// The planner: DESIGN.md's selection table and each tier's concrete confinement, as a pure function.
#include "plan/plan.h"

#include <algorithm>
#include <type_traits>

#include <fmt/ranges.h>

#include "base/relpath.h"

namespace airlock::plan {

using policy::ExecutorKind;
using policy::NetworkMode;
using policy::Tenancy;
using policy::Workload;

std::string DoorPlan::url() const { return fmt::format("http://{}:{}", address, port); }

std::vector<std::string> DoorPlan::environment() const {
  std::vector<std::string> env;
  // Both spellings: curl reads only the lower-case http_proxy, most other clients either.
  for (const char* name : {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"})
    env.push_back(fmt::format("{}={}", name, url()));
  return env;
}

bool can_have_door(ExecutorKind e) { return e == NamespacesTierPlan::kKind; }

int isolation_level(ExecutorKind e) {
  switch (e) {
    case ExecutorKind::Host: return 0;
    case ExecutorKind::Landlock: return 1;
    case ExecutorKind::Namespaces: return 2;
    case ExecutorKind::Container: return 2;
    case ExecutorKind::Microvm: return 3;
    case ExecutorKind::Auto: return -1;
  }
  return -1;
}

namespace {

// The selection table: what a policy needs, and what `auto` tries in order.
struct Need {
  int level;
  std::vector<ExecutorKind> auto_order;
  std::string why;
};

Need need_of(const policy::TaskPolicy& p) {
  if (p.workload == Workload::UntrustedCode)
    return {3, {ExecutorKind::Microvm}, "untrusted code needs its own guest kernel"};
  if (p.tenancy == Tenancy::MultiTenant)
    return {2,
            {ExecutorKind::Namespaces, ExecutorKind::Container},
            "multi-tenant work needs aggregate limits and its own pid space"};
  if (p.code_network.mode == NetworkMode::Allowlist)
    return {2, {ExecutorKind::Namespaces}, "network for code needs a network cut and a door"};
  return {1,
          {ExecutorKind::Namespaces, ExecutorKind::Landlock},
          "a trusted toolchain for one tenant with no network needs filesystem confinement"};
}

// What every confining tier lets a toolchain read (and execute, for the directories): the same
// list for Landlock rules and for the namespaces tier's read-only binds.
struct SystemDir {
  const char* path;
  bool optional;  // not on every machine
};
constexpr SystemDir kSystemDirs[] = {{"/usr", false},  {"/bin", false},   {"/sbin", false},   {"/lib", false},
                                     {"/lib64", true}, {"/lib32", true}, {"/libx32", true}};
// The few /etc files programs read: loader, users and groups, certificates, locale, time zone.
constexpr const char* kEtcFiles[] = {"/etc/ld.so.cache",   "/etc/ld.so.conf",    "/etc/ld.so.conf.d",
                                     "/etc/passwd",        "/etc/group",         "/etc/nsswitch.conf",
                                     "/etc/ssl",           "/etc/ca-certificates", "/etc/localtime",
                                     "/etc/timezone",      "/etc/locale.alias",  "/etc/default/locale",
                                     "/etc/alternatives",  "/etc/mime.types",
                                     // git dies on a system configuration it cannot read
                                     "/etc/gitconfig",     "/etc/gitattributes"};

// Which cgroup version gives memory, pids and cpu together; v2 preferred.
std::optional<int> cgroup_version(const HostFacts& f) {
  auto all = [](const std::vector<std::string>& v) {
    for (const char* c : {"memory", "pids", "cpu"})
      if (std::find(v.begin(), v.end(), c) == v.end()) return false;
    return true;
  };
  if (all(f.cgroup_v2_controllers)) return 2;
  if (all(f.cgroup_v1_writable)) return 1;
  return std::nullopt;
}

// The first credential file a readable host path would show, as {file, readable path}.
std::optional<std::pair<std::string, std::string>> exposed_credential(const std::vector<std::string>& readable,
                                                                      const HostFacts& f) {
  for (const auto& c : f.credential_files)
    for (const auto& r : readable)
      if (is_under(c, r)) return std::pair{c, r};
  return std::nullopt;
}

std::vector<std::string> landlock_host_paths(const policy::TaskPolicy& p) {
  std::vector<std::string> out;
  for (const auto& d : kSystemDirs) out.push_back(d.path);
  for (const char* e : kEtcFiles) out.push_back(e);
  out.insert(out.end(), p.read_only_paths.begin(), p.read_only_paths.end());
  return out;
}

NamespacesPlan namespaces_plan(const policy::TaskPolicy& p, const HostFacts& f) {
  NamespacesPlan n;
  // The same host paths the Landlock tier reads, bound read-only; nothing else of the host.
  n.ro_binds = landlock_host_paths(p);
  // Credential files beneath a bind are covered, so no route inside reaches their bytes.
  for (const auto& c : f.credential_files)
    if (under_any(c, n.ro_binds))
      n.masked.push_back(c);
  n.dev_nodes = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"};
  n.proc_masked = {"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/sysrq-trigger",
                   "/proc/kallsyms", "/proc/kmsg"};
  n.proc_read_only = {"/proc/sys", "/proc/irq", "/proc/bus", "/proc/fs"};
  return n;
}

std::optional<ProcessLimitMechanism> process_mechanism(const HostFacts& f) {
  // RLIMIT_NPROC never binds uid 0 (the kernel exempts the root user), so root needs a pids cgroup.
  if (!f.running_as_root) return ProcessLimitMechanism::RlimitNproc;
  auto has = [](const std::vector<std::string>& v) {
    return std::find(v.begin(), v.end(), "pids") != v.end();
  };
  if (has(f.cgroup_v2_controllers)) return ProcessLimitMechanism::CgroupV2Pids;
  if (has(f.cgroup_v1_writable)) return ProcessLimitMechanism::CgroupV1Pids;
  return std::nullopt;
}

LandlockPlan landlock_plan(const policy::TaskPolicy& p, const HostFacts& f) {
  LandlockPlan l;
  l.abi_measured = f.landlock_abi;
  auto host = [&](std::string path, Access a, bool optional = false) {
    l.fs_rules.push_back({Anchor::Host, std::move(path), a, optional});
  };
  // System directories a toolchain needs to run: read and execute, nothing more.
  for (const auto& d : kSystemDirs) host(d.path, Access::Exec, d.optional);
  for (const char* e : kEtcFiles) host(e, Access::Read, true);
  host("/dev/null", Access::DevWrite);
  host("/dev/zero", Access::DevWrite);
  host("/dev/full", Access::DevWrite);
  host("/dev/random", Access::Read);
  host("/dev/urandom", Access::Read);
  for (const auto& extra : p.read_only_paths) host(extra, Access::Exec);
  // The session: the view readable (it holds only readable and write-back paths), the
  // write-back paths writable, and a scratch TMPDIR that is never written back.
  l.fs_rules.push_back({Anchor::View, ".", Access::Exec, false});
  for (const auto& w : p.write_back_paths) l.fs_rules.push_back({Anchor::View, w, Access::Write, false});
  l.fs_rules.push_back({Anchor::Scratch, ".", Access::Write, false});
  // No TCP at all, or (with a door) connect to the door's port only: a second wall behind the
  // network namespace, which holds only loopback.
  l.restrict_tcp = f.landlock_abi >= 4;
  if (p.code_network.mode == NetworkMode::Allowlist) l.tcp_connect_ports = {DoorPlan{}.port};
  l.restrict_ioctl_dev = f.landlock_abi >= 5;
  l.scope_abstract_unix = f.landlock_abi >= 6;
  l.scope_signal = f.landlock_abi >= 6;
  return l;
}

SeccompPlan seccomp_plan(const policy::TaskPolicy& p) {
  SeccompPlan s;
  // What Landlock cannot stop: other processes' memory, kernel keyrings, kernel programs,
  // io_uring (a second syscall path around this filter), mounts and namespaces, modules.
  s.denied_syscalls = {"ptrace", "process_vm_readv", "process_vm_writev", "keyctl", "add_key",
                       "request_key", "bpf", "userfaultfd", "perf_event_open", "io_uring_setup",
                       "io_uring_enter", "io_uring_register", "mount", "umount2", "pivot_root",
                       "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
                       "fspick", "mount_setattr", "unshare", "setns", "kexec_load",
                       "kexec_file_load", "init_module", "finit_module", "delete_module",
                       "reboot", "swapon", "swapoff", "acct", "quotactl", "syslog",
                       "open_by_handle_at", "name_to_handle_at", "iopl", "ioperm",
                       "settimeofday", "clock_settime", "clock_adjtime", "vhangup"};
  s.only_unix_sockets = p.code_network.mode == NetworkMode::Off;
  s.denied_ioctls = {"TIOCSTI", "TIOCLINUX"};
  s.deny_namespace_clone = true;
  // Calls that reach another process by pid, process group or uid: Landlock's signal scoping does
  // not cover them, so a command could renice, re-limit or re-pin any process of its uid (as root,
  // any process), its own supervisor included (whose limits keep the wall clock). Each works on
  // the caller itself only. The read-only sched_getaffinity, sched_getparam and sched_getscheduler
  // stay: glibc's pthread_getattr_np and pthread_getschedparam call them with the thread's own tid,
  // which no filter can tell from a stranger's, and they change nothing.
  s.self_only_syscalls = {"setpriority", "getpriority", "prlimit64",     "sched_setaffinity",
                          "sched_setscheduler", "sched_setparam", "sched_setattr", "ioprio_set",
                          "ioprio_get",  "migrate_pages", "move_pages",    "get_robust_list"};
  // Calls that take another process by pidfd or pair of pids: no filter can see whom they name.
  for (const char* name : {"kcmp", "pidfd_getfd", "process_madvise", "process_mrelease"})
    s.denied_syscalls.push_back(name);
  return s;
}

// What the Landlock tier shares with the host and Landlock cannot scope (the namespaces tier has
// an IPC namespace and a mount namespace of its own): SysV IPC objects (same-uid ones, or as root
// anyone's, are readable, and msgrcv consumes the host's messages), and inotify and fanotify
// marks, which report the names of files created in directories Landlock keeps unreadable.
constexpr const char* kHostSharedSyscalls[] = {
    "shmget", "shmat",          "shmctl",           "msgget",       "msgsnd",        "msgrcv",
    "msgctl", "semget",         "semop",            "semtimedop",   "semctl",        "inotify_init",
    "inotify_init1", "inotify_add_watch", "fanotify_init", "fanotify_mark"};

LimitsPlan limits_plan(const policy::TaskPolicy& p, ProcessLimitMechanism m) {
  LimitsPlan l;
  l.memory_bytes = static_cast<uint64_t>(p.limits.memory_mb) * 1024 * 1024;
  l.cpu_seconds = static_cast<uint64_t>(p.limits.cpu_seconds);
  l.max_processes = static_cast<uint64_t>(p.limits.max_processes);
  l.process_mechanism = m;
  l.wall_timeout_ms = static_cast<uint64_t>(p.limits.command_timeout_seconds) * 1000;
  l.session_budget_ms = static_cast<uint64_t>(p.limits.session_budget_seconds) * 1000;
  return l;
}

bool is_built(ExecutorKind e, BuiltTiers built) { return std::find(built.begin(), built.end(), e) != built.end(); }

Json candidate_json(const Candidate& c) {
  return {{"executor", policy::to_string(c.executor)}, {"available", c.available}, {"reason", c.reason}};
}

// The tiers a policy lets the planner try, in order; or why it names one it may not have.
Result<std::vector<ExecutorKind>> tiers_to_try(const policy::TaskPolicy& p, const Need& need, Profile profile) {
  // The agent tool's own sandbox confines (it needs the namespaces our seccomp forbids);
  // airlock supervises, replaces the environment and records that it claims no confinement.
  if (p.confinement == policy::Confinement::Vendor) return std::vector{ExecutorKind::Host};
  if (p.executor == ExecutorKind::Auto) return need.auto_order;
  if (p.executor == ExecutorKind::Host) {
    if (profile != Profile::Development)
      return fail(Code::IsolationPolicyInvalid,
                  "the host executor exists only in the development profile (--profile development)",
                  {{"executor", "host"}, {"profile", to_string(profile)}});
    return std::vector{ExecutorKind::Host};
  }
  if (isolation_level(p.executor) < need.level)
    return fail(Code::IsolationPolicyInvalid,
                fmt::format("executor {} gives isolation level {}, but {} (level {})", policy::to_string(p.executor),
                            isolation_level(p.executor), need.why, need.level),
                {{"executor", policy::to_string(p.executor)},
                 {"executor_level", isolation_level(p.executor)},
                 {"required_level", need.level}});
  return std::vector{p.executor};
}

// The container tier for this policy: its image must be one the probe ran the check in here, by
// that exact digest. A row for another digest of the same name does not qualify; the refusal
// names what the probe has.
Candidate container_image_check(const policy::TaskPolicy& p, const HostFacts& f, Candidate c) {
  c.available = false;
  if (!p.image) {
    c.reason = "the policy names no image ($.image, NAME@sha256:...): the container tier runs only a pinned image";
    return c;
  }
  auto exposed = exposed_credential(p.read_only_paths, f);
  if (exposed) {
    c.reason = fmt::format("the container tier binds read_only_paths whole and cannot hide the credential file {} "
                           "beneath {}",
                           exposed->first, exposed->second);
    return c;
  }
  std::vector<std::string> have;
  for (const auto& i : f.container.images) {
    if (i.reference == *p.image) {
      if (!i.ok) {
        c.reason = fmt::format("the image {} did not pass the container check here: {}", *p.image, i.reason);
        return c;
      }
      c.available = true;
      c.reason += fmt::format("; image {} checked here", *p.image);
      return c;
    }
    have.push_back(i.reference);
  }
  c.reason = fmt::format("the image {} has no fresh, successful check on this host (`airlock image build`, or "
                         "`airlock image check`); checked here: {}",
                         *p.image, have.empty() ? std::string("none") : fmt::format("{}", fmt::join(have, ", ")));
  return c;
}

// `assess` for this policy: what the tier cannot give this policy on top of what it cannot give at all.
Candidate assess_for(const policy::TaskPolicy& p, ExecutorKind e, const HostFacts& f, Profile profile,
                     BuiltTiers built) {
  bool vendor = p.confinement == policy::Confinement::Vendor;
  Candidate c = assess(e, f, vendor ? Profile::Development : profile, built);
  if (!c.available) return c;
  if (e == ExecutorKind::Host && vendor)
    c.reason = "confinement vendor: the agent tool's own sandbox confines; airlock makes no claim the agent is confined";
  if (e == ExecutorKind::Container) {
    c = container_image_check(p, f, c);
    if (!c.available) return c;
  }
  // Landlock only adds access: it cannot take a credential file back out of a readable tree.
  if (e == ExecutorKind::Landlock)
    if (auto hit = exposed_credential(landlock_host_paths(p), f)) {
      c.available = false;
      c.reason = fmt::format("Landlock cannot hide the credential file {} beneath the readable {}", hit->first,
                             hit->second);
    }
  // Network for code goes only through a door, which only the namespaces tier has (a network
  // namespace of its own to cut); any other tier is refused for such a policy, never run with
  // the network open nor silently without the network it asked for. The development host
  // executor is the exception the policy names: no isolation at all, recorded as a relaxation.
  if (c.available && p.code_network.mode == NetworkMode::Allowlist && e != ExecutorKind::Host && !can_have_door(e)) {
    c.available = false;
    c.reason = e == ExecutorKind::Microvm
                   ? std::string("the microvm tier's guest has no network device and no network door yet, so it "
                                 "cannot give code_network allowlist")
                   : e == ExecutorKind::Container
                   ? std::string("the container tier has no network door yet, so it cannot give code_network allowlist")
                   : fmt::format("the {} tier cannot cut the network, so it has no network door for code_network "
                                 "allowlist",
                                 policy::to_string(e));
  }
  return c;
}

// The first tier of `order` that can run this policy here, every one tried recorded in
// plan.considered; or the refusal that names each with its reason.
Result<ExecutorKind> choose_tier(const policy::TaskPolicy& p, const Need& need, const HostFacts& f,
                                 const std::vector<ExecutorKind>& order, BuiltTiers built, ExecutionPlan& plan) {
  for (ExecutorKind e : order) {
    plan.considered.push_back(assess_for(p, e, f, plan.profile, built));
    const Candidate& c = plan.considered.back();
    if (!c.available) continue;
    plan.why = p.confinement == policy::Confinement::Vendor ? c.reason
               : p.executor == ExecutorKind::Auto
                   ? fmt::format("auto: {}; first available of the tiers tried", need.why)
                   : fmt::format("the policy names executor {}", policy::to_string(e));
    return e;
  }
  // An explicit Landlock request on a kernel below the floor has its own code.
  if (p.executor == ExecutorKind::Landlock && f.landlock_abi > 0 && f.landlock_abi < kLandlockTierAbiFloor)
    return fail(Code::ConfinementBelowFloor,
                fmt::format("Landlock ABI {} measured, the landlock tier needs at least ABI {} (signal and "
                            "abstract-socket scoping)",
                            f.landlock_abi, kLandlockTierAbiFloor),
                {{"landlock_abi", f.landlock_abi}, {"floor", kLandlockTierAbiFloor}});
  std::vector<std::string> why;
  Json considered = Json::array();
  for (const auto& c : plan.considered) {
    why.push_back(fmt::format("{}: {}", policy::to_string(c.executor), c.reason));
    considered.push_back(candidate_json(c));
  }
  return fail(Code::ExecutorUnavailable,
              fmt::format("no executor the policy allows can run here ({})",
                          why.empty() ? "none tried" : fmt::format("{}", fmt::join(why, "; "))),
              {{"considered", considered}, {"required_level", need.level}});
}

// The namespaces tier's sandbox, which also confines QEMU on the microvm tier.
NamespacesSandbox namespaces_sandbox(const policy::TaskPolicy& p, const HostFacts& f) {
  NamespacesSandbox s;
  s.namespaces = namespaces_plan(p, f);
  s.seccomp = seccomp_plan(p);
  // Landlock too where the kernel has it: a second wall behind the mount namespace.
  if (f.landlock_abi >= 3) s.landlock = landlock_plan(p, f);
  s.cgroup.version = *cgroup_version(f);  // assess() made sure there is one
  s.cgroup.controllers = {"memory", "pids", "cpu"};
  s.cgroup.memory_bytes = static_cast<uint64_t>(p.limits.memory_mb) * 1024 * 1024;
  s.cgroup.pids_max = static_cast<uint64_t>(p.limits.max_processes);
  s.cgroup.cpu_quota_us = s.cgroup.cpu_period_us;  // one CPU's worth of time for the whole sandbox
  return s;
}

// The namespaces sandbox makes its own /tmp (the session's scratch directory), /proc and /dev: a
// read-only path beneath one of them would be hidden there, so it is refused by name, never dropped.
Result<void> check_read_only_paths_shown(const policy::TaskPolicy& p, const char* tier = "namespaces",
                                         std::initializer_list<const char*> owns = {"/tmp", "/proc", "/dev"}) {
  for (const auto& r : p.read_only_paths)
    for (const char* own : owns)
      if (is_under(r, own))
        return fail(Code::IsolationPolicyInvalid,
                    fmt::format("read_only_paths has {}, beneath {}, which the {} tier makes its own (the "
                                "sandbox's {} hides the host's): install it elsewhere, such as /opt or /var/tmp",
                                r, own, tier, own),
                    {{"read_only_path", r}, {"hidden_by", own}, {"executor", tier}});
  return {};
}

// The chosen tier's confinement, and the limits and relaxations that go with it. Each case builds
// its tier's plan whole.
Result<TierPlan> plan_tier(ExecutorKind e, const policy::TaskPolicy& p, const HostFacts& f, ExecutionPlan& plan) {
  switch (e) {
    case ExecutorKind::Host: {
      plan.relaxations.push_back("executor: host");
      if (p.code_network.mode == NetworkMode::Allowlist)
        plan.relaxations.push_back("code_network: allowlist not enforced (the host's whole network)");
      auto mechanism = process_mechanism(f);
      if (!mechanism) plan.relaxations.push_back("processes: not limited for uid 0");
      plan.limits = limits_plan(p, mechanism.value_or(ProcessLimitMechanism::RlimitNproc));
      return HostTierPlan{};
    }
    case ExecutorKind::Landlock: {
      LandlockTierPlan t{landlock_plan(p, f), seccomp_plan(p)};
      t.landlock.abi_floor = kLandlockTierAbiFloor;
      // No mount namespace hides the host's unix sockets here, and Landlock cannot stop a connect.
      t.seccomp.no_sockets = p.code_network.mode == NetworkMode::Off;
      for (const char* name : kHostSharedSyscalls) t.seccomp.denied_syscalls.push_back(name);
      plan.limits = limits_plan(p, *process_mechanism(f));  // assess() made sure there is one
      return t;
    }
    case ExecutorKind::Namespaces: {
      TRY(check_read_only_paths_shown(p));
      NamespacesTierPlan t{namespaces_sandbox(p, f), std::nullopt};
      if (p.code_network.mode == NetworkMode::Allowlist) {
        t.door = DoorPlan{};
        t.door->rules = p.code_network.rules;
      }
      // RLIMIT_AS per process stays as a first line; the cgroup bounds the sum.
      plan.limits = limits_plan(p, t.sandbox.cgroup.version == 2 ? ProcessLimitMechanism::CgroupV2Pids
                                                                 : ProcessLimitMechanism::CgroupV1Pids);
      return t;
    }
    case ExecutorKind::Microvm: {
      // The namespaces sandbox confines QEMU; the policy's limits bind the guest. QEMU gets the
      // guest's RAM plus its own overhead, the pids its threads need, and no RLIMIT_AS or
      // RLIMIT_CPU of its own (it reserves far more address space than it uses; the guest applies
      // RLIMIT_CPU to the command, and the wall clock kills QEMU).
      MicrovmTierPlan t{MicrovmPlan{}, namespaces_sandbox(p, f)};
      plan.limits = limits_plan(p, t.qemu.cgroup.version == 2 ? ProcessLimitMechanism::CgroupV2Pids
                                                              : ProcessLimitMechanism::CgroupV1Pids);
      MicrovmPlan& vm = t.guest;
      vm.acceleration = f.microvm.acceleration;
      vm.memory_mb = static_cast<uint64_t>(p.limits.memory_mb);
      vm.vcpus = 1;
      vm.kernel = f.microvm.kernel;
      vm.kernel_sha256 = f.microvm.kernel_sha256;
      vm.initramfs = f.microvm.initramfs;
      vm.initramfs_sha256 = f.microvm.initramfs_sha256;
      vm.tsc_khz = f.microvm.tsc_khz;
      vm.cpu_seconds = plan.limits.cpu_seconds;
      vm.max_processes = plan.limits.max_processes;
      if (vm.acceleration == "kvm") {
        t.qemu.namespaces.dev_nodes.push_back("/dev/kvm");
        if (t.qemu.landlock) t.qemu.landlock->fs_rules.push_back({Anchor::Host, "/dev/kvm", Access::DevWrite, false});
      }
      CgroupPlan& cg = t.qemu.cgroup;
      cg.memory_bytes = (vm.memory_mb + kMicrovmOverheadMb) * 1024 * 1024;
      cg.pids_max = 64;
      cg.cpu_quota_us = cg.cpu_period_us * static_cast<uint64_t>(vm.vcpus);
      plan.limits.memory_bytes = 0;
      plan.limits.cpu_seconds = 0;
      plan.limits.max_processes = cg.pids_max;
      return t;
    }
    case ExecutorKind::Container: {
      TRY(check_read_only_paths_shown(p, "container", {"/tmp", "/proc", "/dev", "/work", "/sys"}));
      for (const auto& r : p.read_only_paths)
        if (r.find(':') != std::string::npos || r.find(',') != std::string::npos)
          return fail(Code::IsolationPolicyInvalid,
                      fmt::format("read_only_paths has {}: the container engine's bind option cannot carry a ':' or ','", r),
                      {{"read_only_path", r}, {"executor", "container"}});
      const auto& img = *std::find_if(f.container.images.begin(), f.container.images.end(),
                                      [&](const auto& i) { return i.reference == *p.image; });  // assess_for found it
      ContainerTierPlan t;
      t.container.engine = f.container.engine;
      t.container.runtime = f.container.runtime;
      t.container.rootless = f.container.rootless;
      t.container.image = img.reference;
      t.container.image_id = img.image_id;
      NamespacesSandbox sandbox = namespaces_sandbox(p, f);
      t.cgroup = sandbox.cgroup;
      t.seccomp = sandbox.seccomp;
      t.read_only_paths = p.read_only_paths;
      plan.limits = limits_plan(p, t.cgroup.version == 2 ? ProcessLimitMechanism::CgroupV2Pids
                                                         : ProcessLimitMechanism::CgroupV1Pids);
      return t;
    }
    case ExecutorKind::Auto:
      break;
  }
  // assess() refuses a tier this planner has no plan for; reaching here is a bug.
  return fail(Code::InternalError, fmt::format("the planner has no plan for the {} tier", policy::to_string(e)),
              {{"executor", policy::to_string(e)}});
}

}  // namespace

policy::ExecutorKind executor_of(const TierPlan& t) {
  return std::visit([](const auto& tier) { return std::decay_t<decltype(tier)>::kKind; }, t);
}

Candidate assess(ExecutorKind e, const HostFacts& f, Profile profile, BuiltTiers built) {
  Candidate c{e, false, ""};
  if (e == ExecutorKind::Auto) {
    c.reason = "auto is not an executor";
    return c;
  }
  if (!is_built(e, built)) {
    c.reason = fmt::format("no executor implements the {} tier in this build", policy::to_string(e));
    return c;
  }
  switch (e) {
    case ExecutorKind::Host:
      if (profile != Profile::Development) {
        c.reason = "the host executor exists only in the development profile";
        return c;
      }
      c.available = true;
      c.reason = "no isolation (development profile)";
      return c;
    case ExecutorKind::Landlock: {
      if (f.landlock_abi == 0) {
        auto it = f.reasons.find("landlock_abi");
        c.reason = "Landlock is not available: " +
                   (it != f.reasons.end() ? it->second : std::string("absent"));
        return c;
      }
      if (f.landlock_abi < kLandlockTierAbiFloor) {
        c.reason = fmt::format("Landlock ABI {} is below the landlock tier's floor of ABI {}: without signal "
                               "scoping a command could signal its own supervisor",
                               f.landlock_abi, kLandlockTierAbiFloor);
        return c;
      }
      if (!f.seccomp_filter || !f.no_new_privs) {
        c.reason = "seccomp filters or no_new_privs are not available";
        return c;
      }
      if (!process_mechanism(f)) {
        c.reason = "running as root, where RLIMIT_NPROC does not bind, and no pids cgroup is writable";
        return c;
      }
      c.available = true;
      c.reason = fmt::format("Landlock ABI {} with seccomp", f.landlock_abi);
      return c;
    }
    case ExecutorKind::Namespaces: {
      auto why_not = [&](const char* fact) {
        auto it = f.reasons.find(fact);
        return it != f.reasons.end() ? it->second : std::string("absent");
      };
      if (!f.user_namespaces) {
        c.reason = "user namespaces are not available: " + why_not("user_namespaces");
        return c;
      }
      if (!f.seccomp_filter || !f.no_new_privs) {
        c.reason = "seccomp filters or no_new_privs are not available";
        return c;
      }
      if (!cgroup_version(f)) {
        c.reason = "no cgroup we may write has memory, pids and cpu together (v2 delegated: [" +
                   fmt::format("{}", fmt::join(f.cgroup_v2_controllers, ",")) + "], v1 writable: [" +
                   fmt::format("{}", fmt::join(f.cgroup_v1_writable, ",")) + "])";
        // Last, so a person can copy it: the probe knows the host's cgroup version and the user.
        if (!f.cgroup_fix.empty()) c.reason += "; to fix: " + f.cgroup_fix;
        return c;
      }
      c.available = true;
      c.reason = fmt::format("user, mount, pid, net, ipc, uts and cgroup namespaces; cgroup v{} limits{}{}",
                             *cgroup_version(f),
                             *cgroup_version(f) == 1 && !f.cgroup_v1_base.empty() ? " in " + f.cgroup_v1_base : "",
                             f.landlock_abi >= 3 ? "; Landlock and seccomp inside" : "; seccomp inside");
      return c;
    }
    case ExecutorKind::Microvm: {
      // QEMU runs inside the namespaces tier: without that wall there is no microVM tier.
      Candidate ns = assess(ExecutorKind::Namespaces, f, profile, built);
      if (!ns.available) {
        c.reason = "QEMU runs confined by the namespaces tier, which is unavailable: " + ns.reason;
        return c;
      }
      if (!f.microvm.verified) {
        // The probe's own words when it ran; else what the facts show: without an image, building
        // it comes first (verify boots it).
        if (auto it = f.reasons.find("microvm"); it != f.reasons.end())
          c.reason = it->second;
        else if (f.microvm.kernel.empty())
          c.reason = "no guest image on this host: run `airlock vm build`, then `airlock vm verify`";
        else
          c.reason = "the escape suite has not passed against a guest on this host: run `airlock vm verify`";
        return c;
      }
      c.available = true;
      c.reason = fmt::format("a guest kernel of its own under QEMU ({}), QEMU inside the namespaces tier",
                             f.microvm.acceleration);
      return c;
    }
    case ExecutorKind::Container: {
      if (f.container.engine.empty()) {
        auto it = f.reasons.find("container");
        c.reason = "no container engine ran a container here: " +
                   (it != f.reasons.end() ? it->second : std::string("absent"));
        return c;
      }
      if (!cgroup_version(f)) {
        c.reason = "no cgroup we may write has memory, pids and cpu together, which the container runs below";
        if (!f.cgroup_fix.empty()) c.reason += "; to fix: " + f.cgroup_fix;
        return c;
      }
      c.available = true;
      c.reason = fmt::format("a one-shot container of a pinned image ({}, {}{}); no network, read-only root, "
                             "airlock's seccomp and cgroup v{} limits",
                             f.container.engine, f.container.runtime, f.container.rootless ? ", rootless" : "",
                             *cgroup_version(f));
      return c;
    }
    case ExecutorKind::Auto:
      break;
  }
  return c;
}

Result<ExecutionPlan> plan_execution(const policy::TaskPolicy& p, const HostFacts& f, Profile profile,
                                     BuiltTiers built) {
  Need need = need_of(p);
  ExecutionPlan plan;
  plan.profile = profile;
  plan.required_level = need.level;
  plan.policy_digest = policy::digest(p);
  if (p.confinement == policy::Confinement::Vendor) plan.relaxations.push_back("confinement: vendor");

  std::vector<ExecutorKind> order = TRY(tiers_to_try(p, need, profile));
  ExecutorKind chosen = TRY(choose_tier(p, need, f, order, built, plan));

  plan.view_paths = p.readable;
  for (const auto& w : p.write_back_paths)
    if (std::find(plan.view_paths.begin(), plan.view_paths.end(), w) == plan.view_paths.end())
      plan.view_paths.push_back(w);
  plan.write_back_paths = p.write_back_paths;
  plan.denied_names = p.denied_names;
  plan.protected_paths = p.protected_paths;
  for (const auto& w : p.writable_protected_paths)
    plan.relaxations.push_back(fmt::format("writable_protected_paths: {}", w));
  plan.env_passthrough = {"LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ"};

  plan.confinement = TRY(plan_tier(chosen, p, f, plan));

  auto any_private = [](const std::vector<policy::EgressRule>& rules) {
    return std::any_of(rules.begin(), rules.end(), [](const auto& r) { return r.allow_private; });
  };
  if (any_private(p.egress)) plan.relaxations.push_back("egress: allow_private");
  if (any_private(p.code_network.rules)) plan.relaxations.push_back("code_network: allow_private");
  return plan;
}

FactNeeds fact_needs(const policy::TaskPolicy& p, BuiltTiers built) {
  std::vector<ExecutorKind> order =
      p.executor == ExecutorKind::Auto ? need_of(p).auto_order : std::vector<ExecutorKind>{p.executor};
  FactNeeds n;
  for (ExecutorKind e : order) {
    if (!is_built(e, built)) continue;  // assess() refuses it before reading any fact
    switch (e) {
      case ExecutorKind::Landlock:
      case ExecutorKind::Host:
        n.cgroups = true;  // the pids cgroup that limits processes for root
        break;
      case ExecutorKind::Namespaces:
        n.user_namespaces = n.overlayfs = n.cgroups = true;
        break;
      case ExecutorKind::Microvm:  // QEMU runs inside the namespaces tier
        n.kvm = n.user_namespaces = n.overlayfs = n.cgroups = true;
        break;
      case ExecutorKind::Container:  // the engine and images, and the cgroup it runs below
        n.container = n.cgroups = true;
        break;
      case ExecutorKind::Auto:
        break;
    }
  }
  return n;
}

TierSections sections_of(const TierPlan& tier) {
  TierSections s;
  std::visit(
      [&](const auto& t) {
        using T = std::decay_t<decltype(t)>;
        if constexpr (std::is_same_v<T, LandlockTierPlan>) {
          s.landlock = &t.landlock;
          s.seccomp = &t.seccomp;
        } else if constexpr (std::is_same_v<T, NamespacesTierPlan>) {
          s.sandbox = &t.sandbox;
          if (t.door) s.door = &*t.door;
        } else if constexpr (std::is_same_v<T, MicrovmTierPlan>) {
          s.sandbox = &t.qemu;
          s.guest = &t.guest;
        } else if constexpr (std::is_same_v<T, ContainerTierPlan>) {
          s.seccomp = &t.seccomp;
          s.cgroup = &t.cgroup;
          s.container = &t.container;
        }
      },
      tier);
  if (s.sandbox) {
    s.cgroup = &s.sandbox->cgroup;
    s.seccomp = &s.sandbox->seccomp;
    if (s.sandbox->landlock) s.landlock = &*s.sandbox->landlock;
  }
  return s;
}

Json to_json(const ExecutionPlan& p) {
  // Every tier's plan under the same keys, null where the tier has no such section.
  auto [landlock, seccomp, sandbox, door, microvm, cgroup, container] = sections_of(p.confinement);

  Json j;
  j["profile"] = to_string(p.profile);
  j["executor"] = policy::to_string(p.executor());
  j["tier"] = p.tier();
  j["required_level"] = p.required_level;
  j["why"] = p.why;
  j["considered"] = Json::array();
  for (const auto& c : p.considered) j["considered"].push_back(candidate_json(c));
  j["policy_digest"] = p.policy_digest;
  j["relaxations"] = p.relaxations;
  j["landlock"] = nullptr;
  if (landlock) {
    Json rules = Json::array();
    for (const auto& r : landlock->fs_rules)
      rules.push_back({{"anchor", to_string(r.anchor)}, {"path", r.path}, {"access", to_string(r.access)}, {"optional", r.optional}});
    j["landlock"] = {{"abi_floor", landlock->abi_floor},
                     {"abi_measured", landlock->abi_measured},
                     {"fs_rules", rules},
                     {"restrict_tcp", landlock->restrict_tcp},
                     {"tcp_connect_ports", landlock->tcp_connect_ports},
                     {"restrict_ioctl_dev", landlock->restrict_ioctl_dev},
                     {"scope_abstract_unix", landlock->scope_abstract_unix},
                     {"scope_signal", landlock->scope_signal}};
  }
  j["seccomp"] = nullptr;
  if (seccomp)
    j["seccomp"] = {{"denied_syscalls", seccomp->denied_syscalls},
                    {"only_unix_sockets", seccomp->only_unix_sockets},
                    {"no_sockets", seccomp->no_sockets},
                    {"denied_ioctls", seccomp->denied_ioctls},
                    {"deny_namespace_clone", seccomp->deny_namespace_clone},
                    {"self_only_syscalls", seccomp->self_only_syscalls}};
  j["namespaces"] = nullptr;
  j["cgroup"] = nullptr;
  if (sandbox) {
    const NamespacesPlan& n = sandbox->namespaces;
    j["namespaces"] = {{"ro_binds", n.ro_binds},
                       {"masked", n.masked},
                       {"dev_nodes", n.dev_nodes},
                       {"proc_masked", n.proc_masked},
                       {"proc_read_only", n.proc_read_only},
                       {"hostname", n.hostname},
                       {"loopback_only", n.loopback_only}};
  }
  if (cgroup) {
    const CgroupPlan& cg = *cgroup;
    j["cgroup"] = {{"version", cg.version},
                   {"controllers", cg.controllers},
                   {"memory_bytes", cg.memory_bytes},
                   {"swap_bytes", 0},
                   {"pids_max", cg.pids_max},
                   {"cpu_quota_us", cg.cpu_quota_us},
                   {"cpu_period_us", cg.cpu_period_us}};
  }
  // Only on the container tier, so the plans of the other tiers read as they did.
  if (container)
    j["container"] = {{"engine", container->engine},
                      {"runtime", container->runtime},
                      {"rootless", container->rootless},
                      {"image", container->image},
                      {"image_id", container->image_id},
                      {"workdir", container->workdir},
                      {"tmp_bytes", container->tmp_bytes},
                      {"read_only_root", true},
                      {"read_only_paths", std::get<ContainerTierPlan>(p.confinement).read_only_paths},
                      {"network", "none"}};
  j["microvm"] = nullptr;
  if (microvm)
    j["microvm"] = {{"qemu", microvm->qemu},
                    {"acceleration", microvm->acceleration},
                    {"memory_mb", microvm->memory_mb},
                    {"vcpus", microvm->vcpus},
                    {"kernel", microvm->kernel},
                    {"kernel_sha256", microvm->kernel_sha256},
                    {"initramfs", microvm->initramfs},
                    {"initramfs_sha256", microvm->initramfs_sha256},
                    {"tsc_khz", microvm->tsc_khz},
                    {"cpu_seconds", microvm->cpu_seconds},
                    {"max_processes", microvm->max_processes},
                    {"pool", microvm->pool},
                    {"network_devices", Json::array()}};
  j["door"] = nullptr;
  if (door)
    j["door"] = {{"listen", fmt::format("{}:{}", door->address, door->port)},
                 {"proxy_url", door->url()},
                 {"rules", policy::to_json(door->rules)}};
  j["limits"] = {{"memory_bytes", p.limits.memory_bytes},
                 {"cpu_seconds", p.limits.cpu_seconds},
                 {"max_processes", p.limits.max_processes},
                 {"process_mechanism", to_string(p.limits.process_mechanism)},
                 {"wall_timeout_ms", p.limits.wall_timeout_ms},
                 {"kill_grace_ms", p.limits.kill_grace_ms},
                 {"session_budget_ms", p.limits.session_budget_ms},
                 {"max_file_bytes", p.limits.max_file_bytes},
                 {"max_open_files", p.limits.max_open_files}};
  j["capabilities"] = p.drops_capabilities() ? "none" : "inherited";
  j["env_passthrough"] = p.env_passthrough;
  j["view_paths"] = p.view_paths;
  j["write_back_paths"] = p.write_back_paths;
  j["denied_names"] = p.denied_names;
  j["protected_paths"] = policy::to_json(p.protected_paths);
  j["protected_first_wall"] = p.protected_first_wall;
  j["network"] = p.host_network();
  return j;
}

}  // namespace airlock::plan
