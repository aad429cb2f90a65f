// cgroup: locating our cgroup, creating a child with limits, joining it and removing it.
#include "linux/cgroup.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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

size_t release_abandoned_cgroups(const std::vector<std::string>& session_ids) {
  size_t removed = 0;
  if (session_ids.empty()) return 0;
  for (std::string_view controller : {std::string_view("pids"), std::string_view("memory"), std::string_view("cpu"),
                                      std::string_view("")}) {
    auto base = own_cgroup_dir(controller);
    if (!base) continue;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(*base, ec)) {
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

// Makes `name` below our own cgroup for `controller` ("" for cgroup2) and opens its cgroup.procs.
Result<void> add_dir(PreparedCgroup& out, std::string_view controller, const std::string& name) {
  auto base = own_cgroup_dir(controller);
  if (!base)
    return fail(Code::ExecutorUnavailable,
                fmt::format("no {} hierarchy for our process", controller.empty() ? "cgroup2" : std::string(controller) + " v1"));
  std::string dir = *base + "/" + name;
  if (::mkdir(dir.c_str(), 0755) < 0) return fail_errno(Code::ExecutorUnavailable, "mkdir " + dir, errno);
  out.dirs.emplace_back(dir);
  if (controller.empty()) {
    // The controllers must be enabled for our children first.
    UniqueFd sub(::open((*base + "/cgroup.subtree_control").c_str(), O_WRONLY | O_CLOEXEC));
    if (sub) (void)!::write(sub.get(), "+pids +memory +cpu", 18);
  }
  UniqueFd procs(::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
  if (!procs) return fail_errno(Code::ExecutorUnavailable, "open " + dir + "/cgroup.procs", errno);
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
