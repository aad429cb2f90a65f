// cgroup: locating our cgroup, creating a child with limits, joining it and removing it.
#include "linux/cgroup.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <sstream>
#include <thread>

#include "base/fs.h"

namespace airlock::linux {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

// The mount point of the hierarchy: cgroup2, or the v1 hierarchy with `controller` in its options.
std::optional<std::string> mount_point(std::string_view controller) {
  auto text = read_file("/proc/self/mountinfo");
  if (!text) return std::nullopt;
  for (const auto& line : split(*text, '\n')) {
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    auto left = split(line.substr(0, dash), ' ');
    auto right = split(line.substr(dash + 3), ' ');
    if (left.size() < 5 || right.size() < 3) continue;
    if (controller.empty()) {
      if (right[0] == "cgroup2") return left[4];
    } else if (right[0] == "cgroup") {
      for (const auto& opt : split(right[2], ','))
        if (opt == controller) return left[4];
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> own_cgroup_dir(std::string_view controller) {
  auto mnt = mount_point(controller);
  if (!mnt) return std::nullopt;
  auto text = read_file("/proc/self/cgroup");
  if (!text) return std::nullopt;
  for (const auto& line : split(*text, '\n')) {
    auto parts = split(line, ':');
    if (parts.size() < 3) continue;
    bool match = false;
    if (controller.empty()) {
      match = parts[0] == "0" && parts[1].empty();
    } else {
      for (const auto& c : split(parts[1], ','))
        if (c == controller) match = true;
    }
    if (match) return *mnt + (parts[2] == "/" ? "" : parts[2]);
  }
  return std::nullopt;
}

Result<std::vector<int>> CgroupDir::procs() const {
  auto text = TRY(read_file(path_ + "/cgroup.procs"));
  std::vector<int> out;
  for (const auto& l : split(text, '\n'))
    if (!l.empty()) out.push_back(std::stoi(l));
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
