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
  for (std::string_view controller : {std::string_view("pids"), std::string_view("")}) {
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
  return fail_errno(Code::ConfigError, "cannot remove cgroup " + p, e);
}

Result<PreparedCgroup> prepare_pids_cgroup(plan::ProcessLimitMechanism m, const std::string& name,
                                           uint64_t max_processes) {
  std::string_view controller = m == plan::ProcessLimitMechanism::CgroupV1Pids ? "pids" : "";
  auto base = own_cgroup_dir(controller);
  if (!base)
    return fail(Code::ExecutorUnavailable,
                fmt::format("no {} hierarchy for our process", controller.empty() ? "cgroup2" : "pids v1"));
  std::string dir = *base + "/" + name;
  if (::mkdir(dir.c_str(), 0755) < 0) return fail_errno(Code::ExecutorUnavailable, "mkdir " + dir, errno);
  PreparedCgroup out{CgroupDir(dir), {}, {}};
  if (m == plan::ProcessLimitMechanism::CgroupV2Pids) {
    // The pids controller must be enabled for children of our cgroup.
    UniqueFd sub(::open((*base + "/cgroup.subtree_control").c_str(), O_WRONLY | O_CLOEXEC));
    if (sub) (void)!::write(sub.get(), "+pids", 5);
  }
  std::string max = std::to_string(max_processes);
  UniqueFd mf(::open((dir + "/pids.max").c_str(), O_WRONLY | O_CLOEXEC));
  if (!mf || ::write(mf.get(), max.data(), max.size()) != static_cast<ssize_t>(max.size()))
    return fail_errno(Code::ExecutorUnavailable, "cannot set " + dir + "/pids.max", errno);
  out.procs = UniqueFd(::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
  if (!out.procs) return fail_errno(Code::ExecutorUnavailable, "open " + dir + "/cgroup.procs", errno);
  out.applied = {{"path", dir}, {"pids.max", max_processes}, {"version", controller.empty() ? 2 : 1}};
  return out;
}

int apply_cgroup(int procs_fd) noexcept {
  if (::write(procs_fd, "0", 1) != 1) return errno;
  return 0;
}

}  // namespace airlock::linux
