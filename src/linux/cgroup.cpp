// cgroup: locating our cgroup, creating a child with limits, joining it and removing it.
#include "linux/cgroup.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <thread>

#include "base/fs.h"
#include "linux/probe.h"

namespace airlock::linux {
std::optional<std::string> own_cgroup_dir(std::string_view controller) {
  auto mountinfo = read_file("/proc/self/mountinfo");
  auto cgroups = read_file("/proc/self/cgroup");
  if (!mountinfo || !cgroups) return std::nullopt;
  auto mounts = parse_mountinfo(*mountinfo);
  auto entries = parse_proc_cgroup(*cgroups);
  return controller.empty() ? cgroup_v2_dir(mounts, entries) : cgroup_v1_dir(controller, mounts, entries);
}

std::string delegated_cgroup_dir(std::string_view controller, uid_t uid) {
  return fmt::format("{}/{}/{}/{}", kCgroupV1Root, controller, kDelegateDirName, uid);
}

std::string cgroup_v2_fix_command(uid_t uid) {
  return fmt::format(
      "sudo mkdir -p /etc/systemd/system/user@{0}.service.d && printf '[Service]\\nDelegate=memory pids cpu\\n' | "
      "sudo tee /etc/systemd/system/user@{0}.service.d/airlock-delegate.conf && sudo systemctl daemon-reload && "
      "sudo systemctl restart user@{0}.service, then run airlock as: systemd-run --user --scope -p Delegate=yes airlock ...",
      uid);
}

std::optional<CgroupBase> cgroup_base(std::string_view controller, const std::vector<MountInfoEntry>& mounts,
                                      const std::vector<ProcCgroupEntry>& cgroups, std::string* why) {
  auto own = controller.empty() ? cgroup_v2_dir(mounts, cgroups, why) : cgroup_v1_dir(controller, mounts, cgroups, why);
  // cgroup2 has no delegated directory of ours: systemd delegates there by putting our own
  // cgroup in a subtree we own (Delegate=yes), so our own is the only candidate.
  if (controller.empty() || (own && ::access(own->c_str(), W_OK) == 0)) {
    if (!own) return std::nullopt;
    return CgroupBase{*own, false};
  }
  const uid_t euid = ::geteuid();
  std::string delegated = delegated_cgroup_dir(controller, euid);
  struct stat st {};
  // Owned by us, not merely writable: a directory another user made writable is not ours to use.
  if (::stat(delegated.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == euid &&
      ::access(delegated.c_str(), W_OK) == 0)
    return CgroupBase{std::move(delegated), true};
  if (!own) return std::nullopt;
  return CgroupBase{*own, false};
}

std::optional<CgroupBase> cgroup_base(std::string_view controller, std::string* why) {
  auto mountinfo = read_file("/proc/self/mountinfo");
  auto cgroups = read_file("/proc/self/cgroup");
  if (!mountinfo || !cgroups) {
    if (why) *why = !mountinfo ? mountinfo.error().message : cgroups.error().message;
    return std::nullopt;
  }
  return cgroup_base(controller, parse_mountinfo(*mountinfo), parse_proc_cgroup(*cgroups), why);
}

bool cgroup_v1_hierarchies_present() {
  auto mountinfo = read_file("/proc/self/mountinfo");
  if (!mountinfo) return false;
  const auto mounts = parse_mountinfo(*mountinfo);
  return std::all_of(std::begin(kSandboxControllers), std::end(kSandboxControllers), [&](std::string_view c) {
    const std::string root = fmt::format("{}/{}", kCgroupV1Root, c);
    struct stat st {};
    if (::stat((root + "/cgroup.procs").c_str(), &st) != 0) return false;
    return std::any_of(mounts.begin(), mounts.end(), [&](const MountInfoEntry& m) {
      const std::string opts = "," + m.super_options + ",";
      return m.fstype == "cgroup" && opts.find(fmt::format(",{},", c)) != std::string::npos;
    });
  });
}

Result<std::vector<std::string>> delegate_cgroups(uid_t uid, gid_t gid) {
  if (!cgroup_v1_hierarchies_present())
    return fail(Code::ConfigError, fmt::format("no cgroup v1 hierarchies of memory, pids and cpu under {}", kCgroupV1Root));
  std::vector<std::string> made;  // created by this call, removed again on failure
  auto undo = [&] {
    for (auto it = made.rbegin(); it != made.rend(); ++it) ::rmdir(it->c_str());
  };
  std::vector<std::string> dirs;
  for (std::string_view c : kSandboxControllers) {
    const std::string parent = fmt::format("{}/{}/{}", kCgroupV1Root, c, kDelegateDirName);
    const std::string dir = delegated_cgroup_dir(c, uid);
    for (const std::string& d : {parent, dir}) {
      if (::mkdir(d.c_str(), 0755) == 0) {
        made.push_back(d);
      } else if (errno != EEXIST) {
        int e = errno;
        undo();
        return fail_errno(Code::IoError, "mkdir " + d, e);
      }
    }
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      undo();
      return fail(Code::IoError, dir + " exists and is not a directory");
    }
    // The directory lets the user make child cgroups; cgroup.procs and tasks let it move its
    // own processes in (v1 asks for write access to the destination and the same uid).
    for (const std::string& f : {dir, dir + "/cgroup.procs", dir + "/tasks"}) {
      if (::chown(f.c_str(), uid, gid) != 0) {
        int e = errno;
        undo();
        return fail_errno(Code::IoError, "chown " + f, e);
      }
    }
    dirs.push_back(dir);
  }
  return dirs;
}

Result<std::vector<std::string>> undelegate_cgroups(uid_t uid) {
  std::vector<std::string> present;
  // Every check before any removal, so a busy directory leaves all of them in place.
  for (std::string_view c : kSandboxControllers) {
    const std::string dir = delegated_cgroup_dir(c, uid);
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0) {
      if (errno == ENOENT) continue;
      return fail_errno(Code::IoError, "stat " + dir, errno);
    }
    if (!S_ISDIR(st.st_mode)) return fail(Code::IoError, dir + " is not a directory");
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
      if (e.is_directory(ec))
        return fail(Code::IoError, fmt::format("{} still holds the cgroup {} (a run in progress?)", dir,
                                               e.path().filename().string()));
    // Read directly: a CgroupDir would kill what is inside and remove the directory.
    auto procs = read_file(dir + "/cgroup.procs");
    if (procs && procs->find_first_not_of(" \n") != std::string::npos)
      return fail(Code::IoError, fmt::format("{} still holds processes: {}", dir, *procs));
    present.push_back(dir);
  }
  std::vector<std::string> removed;
  for (const std::string& dir : present) {
    if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) return fail_errno(Code::IoError, "rmdir " + dir, errno);
    removed.push_back(dir);
    // The shared parent goes when it is empty; another user's directory keeps it.
    (void)::rmdir(dir.substr(0, dir.rfind('/')).c_str());
  }
  return removed;
}

size_t release_abandoned_cgroups(const std::vector<std::string>& session_ids) {
  size_t removed = 0;
  if (session_ids.empty()) return 0;
  for (std::string_view controller : {std::string_view("pids"), std::string_view("memory"), std::string_view("cpu"),
                                      std::string_view("")}) {
    auto base = cgroup_base(controller);
    if (!base) continue;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(base->dir, ec)) {
      std::string name = e.path().filename().string();
      for (const auto& id : session_ids)
        if (name.rfind("airlock-" + id + "-", 0) == 0 && CgroupDir(e.path().string()).release()) ++removed;
    }
  }
  return removed;
}

Result<std::vector<int>> CgroupDir::procs() const {
  auto text = TRY(read_file(path_ + "/cgroup.procs"));
  std::vector<int> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    if (nl > pos) out.push_back(std::stoi(text.substr(pos, nl - pos)));
    pos = nl + 1;
  }
  return out;
}

Result<void> CgroupDir::release() {
  if (path_.empty()) return {};
  // Kill until empty: a process may fork between our read and our kill, so loop.
  for (int round = 0; round < 1000; ++round) {
    auto p = procs();
    if (!p || p->empty()) break;
    for (int pid : *p) ::kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (int tries = 0; tries < 500; ++tries) {
    if (::rmdir(path_.c_str()) == 0 || errno == ENOENT) {
      path_.clear();
      return {};
    }
    if (errno != EBUSY) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // exiting tasks still counted
  }
  int e = errno;
  std::string p = std::exchange(path_, {});
  return fail_errno(Code::IoError, "cannot remove cgroup " + p, e);
}

namespace {

Result<void> write_knob(const std::string& dir, const std::string& knob, const std::string& value) {
  std::string path = dir + "/" + knob;
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd || ::write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size()))
    return fail_errno(Code::ExecutorUnavailable, fmt::format("cannot write {} to {}", value, path), errno);
  return {};
}

bool knob_exists(const std::string& dir, const std::string& knob) {
  return ::access((dir + "/" + knob).c_str(), F_OK) == 0;
}

// Makes `name` below cgroup_base for `controller` ("" for cgroup2) and opens the file that joins it.
Result<void> add_dir(PreparedCgroup& out, std::string_view controller, const std::string& name) {
  std::string why;
  auto found = cgroup_base(controller, &why);
  if (!found)
    return fail(Code::ExecutorUnavailable,
                fmt::format("no {} hierarchy for our process: {}", controller.empty() ? "cgroup2" : std::string(controller) + " v1", why));
  const std::string* base = &found->dir;
  std::string dir = *base + "/" + name;
  if (::mkdir(dir.c_str(), 0755) < 0) return fail_errno(Code::ExecutorUnavailable, "mkdir " + dir, errno);
  out.dirs.emplace_back(dir);
  if (controller.empty()) {
    // The controllers must be enabled for our children first.
    UniqueFd sub(::open((*base + "/cgroup.subtree_control").c_str(), O_WRONLY | O_CLOEXEC));
    if (sub) (void)!::write(sub.get(), "+pids +memory +cpu", 18);
  }
  // The child joins by writing "0" (itself) to this file. On v1 that is `tasks`, which moves only
  // the writing thread: the joining child is single-threaded (a fresh clone that starts no
  // thread), so that is the whole process, and a write naming the writer itself into `tasks`
  // takes no global lock, where `cgroup.procs` write-locks every thread group on the host and
  // waits for an RCU grace period (7-11 ms a join on the 2-core machines here, against 0.12 ms).
  // cgroup2 has no such file for a domain cgroup: there it stays cgroup.procs.
  std::string join = dir + (controller.empty() ? "/cgroup.procs" : "/tasks");
  UniqueFd procs(::open(join.c_str(), O_WRONLY | O_CLOEXEC));
  if (!procs) return fail_errno(Code::ExecutorUnavailable, "open " + join, errno);
  out.procs.push_back(std::move(procs));
  return {};
}

}  // namespace

Result<void> PreparedCgroup::release() {
  procs.clear();
  Result<void> result;
  for (auto& d : dirs)
    if (auto r = d.release(); !r && result) result = r;
  dirs.clear();
  return result;
}

CgroupUsage cgroup_usage(const PreparedCgroup& cg) {
  CgroupUsage u;
  auto number = [](const std::string& file, std::string_view key = {}) -> std::optional<uint64_t> {
    auto text = read_file(file);
    if (!text) return std::nullopt;
    std::string_view t = *text;
    if (!key.empty()) {  // "key value" lines (cpu.stat)
      size_t at = t.starts_with(key) ? 0 : t.find("\n" + std::string(key));
      if (at == std::string_view::npos) return std::nullopt;
      t = t.substr(at + (at ? 1 : 0) + key.size());
    }
    while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc()) return std::nullopt;
    return v;
  };
  for (const auto& d : cg.dirs) {
    const std::string& p = d.path();
    if (!u.memory_bytes) u.memory_bytes = number(p + "/memory.current");
    if (!u.memory_bytes) u.memory_bytes = number(p + "/memory.usage_in_bytes");
    if (!u.processes) u.processes = number(p + "/pids.current");
    if (!u.cpu_us) u.cpu_us = number(p + "/cpu.stat", "usage_usec ");
  }
  return u;
}

Result<PreparedCgroup> prepare_pids_cgroup(plan::ProcessLimitMechanism m, const std::string& name,
                                           uint64_t max_processes) {
  PreparedCgroup out;
  bool v1 = m == plan::ProcessLimitMechanism::CgroupV1Pids;
  TRY(add_dir(out, v1 ? "pids" : "", name));
  TRY(write_knob(out.dirs[0].path(), "pids.max", std::to_string(max_processes)));
  return out;
}

Result<PreparedCgroup> prepare_sandbox_cgroup(const plan::CgroupPlan& plan, const std::string& name) {
  PreparedCgroup out;
  std::string mem = std::to_string(plan.memory_bytes), pids = std::to_string(plan.pids_max);
  if (plan.version == 2) {
    TRY(add_dir(out, "", name));
    const std::string& d = out.dirs[0].path();
    TRY(write_knob(d, "memory.max", mem));
    if (knob_exists(d, "memory.swap.max")) TRY(write_knob(d, "memory.swap.max", "0"));
    TRY(write_knob(d, "pids.max", pids));
    TRY(write_knob(d, "cpu.max", fmt::format("{} {}", plan.cpu_quota_us, plan.cpu_period_us)));
  } else {
    TRY(add_dir(out, "memory", name));
    TRY(add_dir(out, "pids", name));
    TRY(add_dir(out, "cpu", name));
    const std::string &md = out.dirs[0].path(), &pd = out.dirs[1].path(), &cd = out.dirs[2].path();
    TRY(write_knob(md, "memory.limit_in_bytes", mem));
    // With memsw the limit covers memory plus swap: equal to the memory limit means no swap.
    if (knob_exists(md, "memory.memsw.limit_in_bytes")) TRY(write_knob(md, "memory.memsw.limit_in_bytes", mem));
    if (knob_exists(md, "memory.swappiness")) (void)write_knob(md, "memory.swappiness", "0");
    TRY(write_knob(pd, "pids.max", pids));
    TRY(write_knob(cd, "cpu.cfs_period_us", std::to_string(plan.cpu_period_us)));
    TRY(write_knob(cd, "cpu.cfs_quota_us", std::to_string(plan.cpu_quota_us)));
  }
  return out;
}

int apply_cgroup(int procs_fd) noexcept {
  if (::write(procs_fd, "0", 1) != 1) return errno;
  return 0;
}

}  // namespace airlock::linux
