// Enforced as JSON: the one serialiser of the session.open record (airlock.enforced.v1).
#include "exec/enforced.h"

#include <fmt/format.h>

namespace airlock::exec {

Json to_json(const Enforced& e) {
  Json j;
  j["schema"] = kEnforcedSchema;
  j["executor"] = policy::to_string(e.executor);
  j["tier"] = e.tier;

  j["landlock"] = nullptr;
  if (const auto& l = e.landlock) {
    Json rules = Json::array();
    for (const auto& r : l->rules)
      rules.push_back({{"path", r.path}, {"access", plan::to_string(r.access)}, {"rights", r.rights}});
    j["landlock"] = {{"abi", l->abi},
                     {"handled_fs", l->handled_fs},
                     {"net_tcp_bind_connect_denied", l->tcp_bind_connect_denied},
                     {"net_tcp_connect_ports", l->tcp_connect_ports},
                     {"scoped_abstract_unix", l->scoped_abstract_unix},
                     {"scoped_signal", l->scoped_signal},
                     {"rules", rules}};
  }

  j["seccomp"] = nullptr;
  if (const auto& s = e.seccomp) {
    // Syscalls of a foreign architecture kill the process: the deny-list names native numbers only.
    Json sc = {{"default", "allow"}, {"bad_arch", "kill"}, {"denied_syscalls_eperm", s->denied_syscalls},
               {"denied_ioctls", s->denied_ioctls}, {"instructions", s->instructions}};
    Json self_only = Json::array();
    for (const auto& r : s->self_only)
      self_only.push_back(r.self_kind.empty() ? fmt::format("{} (pid 0 only)", r.syscall)
                                              : fmt::format("{} ({} 0 only)", r.syscall, r.self_kind));
    sc["self_only_syscalls_eperm"] = self_only;
    if (s->namespace_clone_denied) {
      sc["clone3"] = "ENOSYS";
      sc["clone_namespace_flags"] = "EPERM";
    }
    switch (s->sockets) {
      case linux::SocketsApplied::AnyFamily: break;
      case linux::SocketsApplied::UnixOnly: sc["socket_families"] = Json::array({"AF_UNIX"}); break;
      case linux::SocketsApplied::None:
        sc["socket_families"] = Json::array();
        sc["socketpair"] = "allowed";
        break;
    }
    j["seccomp"] = sc;
  }

  j["namespaces"] = nullptr;
  if (const auto& n = e.namespaces) {
    const linux::MountsApplied& m = n->mounts;
    Json binds = Json::array();
    for (const auto& b : m.binds) binds.push_back({{"path", b.path}, {"as", b.symlink ? "symlink" : "read-only bind"}});
    Json mounts = {{"new_root", "tmpfs, read-only after pivot_root"},
                   {"binds", binds},
                   {"dev", m.dev},
                   {"proc", "fresh, for the new pid namespace"},
                   {"proc_masked", m.proc_masked},
                   {"proc_read_only", m.proc_read_only},
                   {"credentials_masked", m.credentials_masked},
                   {"tmp", "the session's scratch directory"},
                   {"protected_read_only", m.protected_read_only},
                   {"workspace", m.workspace}};
    j["namespaces"] = {{"new", n->created},
                       {"uid_map", n->uid_map},
                       {"mounts", mounts},
                       {"hostname", n->hostname},
                       {"network", "loopback only"},
                       {"init", "airlock's own, as pid 1"},
                       {"capabilities", e.capabilities_dropped ? "none" : "inherited"}};
  }

  j["cgroup"] = nullptr;
  if (const auto& c = e.cgroup)
    j["cgroup"] = {{"version", c->version},
                   {"memory_bytes", c->memory_bytes},
                   {"swap_bytes", 0},
                   {"pids_max", c->pids_max},
                   {"cpu", fmt::format("{} us per {} us", c->cpu_quota_us, c->cpu_period_us)},
                   {"teardown", "the init's exit kills the namespace; cgroups verified empty, then removed"}};

  j["rlimits"] = Json::object();
  for (const auto& r : e.rlimits) j["rlimits"][r.name] = {{"soft", r.soft}, {"hard", r.hard}};
  j["no_new_privs"] = e.no_new_privs;
  j["capabilities"] = e.capabilities_dropped ? "none: every set emptied, the bounding set too" : "inherited";
  j["process_limit"] = plan::to_string(e.process_limit);
  j["wall_timeout_ms"] = e.wall_timeout_ms;
  j["network"] = to_string(e.network);
  if (const auto& d = e.door)
    j["door"] = {{"listen", fmt::format("{}:{}", d->address, d->port)},
                 {"inside", "a network namespace with only loopback; no resolver"},
                 {"served_by", "airlock, outside the sandbox: CONNECT and plain HTTP, every request "
                               "admitted by the rules and pinned to the address checked"},
                 {"rules", policy::to_json(d->rules)}};
  if (const auto& vm = e.microvm)
    j["microvm"] = {{"acceleration", vm->acceleration},
                    {"memory_mb", vm->memory_mb},
                    {"vcpus", vm->vcpus},
                    {"kernel_sha256", vm->kernel_sha256},
                    {"initramfs_sha256", vm->initramfs_sha256},
                    {"network_devices", "none"},
                    {"qemu_sandbox", "-sandbox on (obsolete, elevateprivileges, spawn, resourcecontrol denied)"},
                    {"qemu_confined_by", "the namespaces tier (the rest of this record), one sandbox per guest"},
                    {"pool", vm->pool},
                    {"guest_processes",
                     {{"mechanism", "cgroup v2 pids in the guest (nsdelegate; the command in a cgroup "
                                    "namespace rooted at its cgroup, born into it by clone3)"},
                      {"pids_max", vm->guest_pids_max},
                      {"setup_failure", "the guest ends before the command runs"}}},
                    {"teardown", "one guest per run, never reused; QEMU is killed with the namespace's init"}};
  if (const auto& c = e.container) {
    j["container"] = {{"engine", c->engine},
                      {"runtime", c->runtime},
                      {"rootless", c->rootless},
                      {"image", c->image},
                      {"image_id", c->image_id},
                      {"root", "the image, read-only"},
                      {"writable", {c->workdir + " (the session's view)", "/tmp (the session's scratch directory)",
                                    "/dev/shm (the engine's, private)"}},
                      {"namespaces", "the engine's: mount, pid, ipc, uts, network (loopback only)"},
                      {"seccomp_installed_by", c->runtime},
                      {"cgroup", c->rootless ? "airlock's sandbox cgroup, which the engine is started in"
                                             : "the engine's cgroup for the container, with the sandbox's limits"},
                      {"teardown", "one container per run, removed after it ends, verified gone"}};
    j["environment"] = "replaced by an allow-list";
    j["file_descriptors"] = "0-2 handed to the engine, which attaches them";
    j["descendants"] = "killed with the container";
    return j;
  }
  // What every tier does, the host's included (linux::launch).
  j["environment"] = "replaced by an allow-list";
  j["file_descriptors"] = "all but 0-2 closed at exec";
  j["descendants"] = "killed when the command ends (child subreaper)";
  return j;
}

}  // namespace airlock::exec
