// cgroup: find our own cgroup in a v1 hierarchy or in v2, and own a child cgroup that removes itself.
#pragma once

#include <optional>
#include <string>

#include "base/error.h"
#include "base/unique_fd.h"
#include "plan/plan.h"

namespace airlock::linux {

// The directory of our own cgroup in the v1 hierarchy carrying `controller`, or in the
// cgroup2 hierarchy when controller is empty. Read from /proc/self/cgroup and mountinfo.
std::optional<std::string> own_cgroup_dir(std::string_view controller);

// A cgroup directory created for one run; release() kills what is left and removes it.
class CgroupDir {
 public:
  CgroupDir() = default;
  explicit CgroupDir(std::string path) : path_(std::move(path)) {}
  CgroupDir(CgroupDir&& o) noexcept : path_(std::exchange(o.path_, {})) {}
  CgroupDir& operator=(CgroupDir&& o) noexcept {
    if (this != &o) {
      (void)release();
      path_ = std::exchange(o.path_, {});
    }
    return *this;
  }
  ~CgroupDir() { (void)release(); }
  const std::string& path() const { return path_; }
  bool valid() const { return !path_.empty(); }
  // Processes still in it (cgroup.procs).
  Result<std::vector<int>> procs() const;
  // SIGKILLs every process in it until it is empty, then removes the directory.
  Result<void> release();

 private:
  std::string path_;
};

// Kills and removes the cgroups of abandoned sessions ("airlock-<id>-<n>" below our own, in
// the pids, memory and cpu v1 hierarchies and in cgroup2). Returns how many it removed.
size_t release_abandoned_cgroups(const std::vector<std::string>& session_ids);

struct PreparedCgroup {
  std::vector<CgroupDir> dirs;  // one per v1 hierarchy, or the one cgroup2 directory
  std::vector<UniqueFd> procs;  // their cgroup.procs opened for writing: the child writes "0" to join
  // Kills what is left, verifies each directory empty and removes it.
  Result<void> release();
};

// Parent side: the sandbox's cgroup(s) below our own with the plan's memory (swap at zero),
// pids and cpu limits.
Result<PreparedCgroup> prepare_sandbox_cgroup(const plan::CgroupPlan& plan, const std::string& name);

// Parent side: a pids cgroup below our own, with pids.max set.
Result<PreparedCgroup> prepare_pids_cgroup(plan::ProcessLimitMechanism mechanism,
                                           const std::string& name, uint64_t max_processes);

// Child side: joins the cgroup by writing "0" to its cgroup.procs. Returns 0 or an errno.
int apply_cgroup(int procs_fd) noexcept;

}  // namespace airlock::linux
