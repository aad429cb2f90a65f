// cgroup: find where our cgroups go (our own, or a delegated one on v1), and own a child cgroup that removes itself.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/unique_fd.h"
#include "linux/probe.h"
#include "plan/plan.h"

namespace airlock::linux {

// The directory of our own cgroup in the v1 hierarchy carrying `controller`, or in the
// cgroup2 hierarchy when controller is empty. Read from /proc/self/cgroup and mountinfo.
std::optional<std::string> own_cgroup_dir(std::string_view controller);

// The one place a user's delegated cgroups live on cgroup v1, made by `airlock setup delegate`
// (root) and owned by that user: /sys/fs/cgroup/<controller>/airlock.delegate/<uid>.
inline constexpr std::string_view kCgroupV1Root = "/sys/fs/cgroup";
inline constexpr std::string_view kDelegateDirName = "airlock.delegate";
std::string delegated_cgroup_dir(std::string_view controller, uid_t uid);

// The v1 controllers a sandbox needs together, in the order their hierarchies are handled.
inline constexpr std::string_view kSandboxControllers[] = {"memory", "pids", "cpu"};

// True when each of kSandboxControllers has a v1 hierarchy mounted at kCgroupV1Root/<controller>.
bool cgroup_v1_hierarchies_present();

// Root: makes delegated_cgroup_dir(c, uid) for each of kSandboxControllers, the directory and its
// cgroup.procs and tasks owned by uid:gid. Idempotent. Nothing is left half made: on a failure,
// what this call created is removed again. Returns the directories.
Result<std::vector<std::string>> delegate_cgroups(uid_t uid, gid_t gid);
// Root: removes what delegate_cgroups made (and kCgroupV1Root/<c>/airlock.delegate once empty).
// Refuses, removing nothing, while any of them still holds a cgroup or a process. Returns the
// directories removed (none when there was nothing to remove).
Result<std::vector<std::string>> undelegate_cgroups(uid_t uid);

// What gives `uid` a writable cgroup2 subtree with memory, pids and cpu: a systemd drop-in with
// Delegate= for its user manager (root), then airlock run in a delegated scope. One line, to copy.
std::string cgroup_v2_fix_command(uid_t uid);

// Where this process makes its sandbox cgroups in one hierarchy: the one owner of that
// decision, which the probe measures and prepare_*_cgroup and the sweep of abandoned cgroups use.
struct CgroupBase {
  std::string dir;         // the parent directory of our per-run cgroups
  bool delegated = false;  // dir is delegated_cgroup_dir(controller, euid), not our own cgroup
};
// Our own cgroup in the v1 hierarchy carrying `controller` (cgroup2 when empty) if we may write
// it; on v1, otherwise, our delegated directory when it is a directory owned by our euid that we
// may write; otherwise our own cgroup still (the probe then says why it is not writable).
// nullopt, with why, when we have no cgroup in that hierarchy.
std::optional<CgroupBase> cgroup_base(std::string_view controller, const std::vector<MountInfoEntry>& mounts,
                                      const std::vector<ProcCgroupEntry>& cgroups, std::string* why = nullptr);
// The same, from /proc/self/mountinfo and /proc/self/cgroup.
std::optional<CgroupBase> cgroup_base(std::string_view controller, std::string* why = nullptr);

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

// Kills and removes the cgroups of abandoned sessions ("airlock-<id>-<n>" below cgroup_base, in
// the pids, memory and cpu v1 hierarchies and in cgroup2). Returns how many it removed.
size_t release_abandoned_cgroups(const std::vector<std::string>& session_ids);

struct PreparedCgroup {
  std::vector<CgroupDir> dirs;  // one per v1 hierarchy, or the one cgroup2 directory
  std::vector<UniqueFd> procs;  // each one's join file opened for writing (v1 tasks, cgroup2 cgroup.procs): the child writes "0"
  // Kills what is left, verifies each directory empty and removes it.
  Result<void> release();
};

// What a run's cgroups hold right now, read from their own counters (nullopt where a
// hierarchy does not count it): memory charged (v1 memory.usage_in_bytes, v2 memory.current),
// processes (pids.current) and, on cgroup2, CPU time (cpu.stat usage_usec; v1 keeps it in
// cpuacct, which a sandbox does not join).
struct CgroupUsage {
  std::optional<uint64_t> memory_bytes, processes, cpu_us;
};
CgroupUsage cgroup_usage(const PreparedCgroup& cg);

// Parent side: the sandbox's cgroup(s) below cgroup_base with the plan's memory (swap at zero),
// pids and cpu limits.
Result<PreparedCgroup> prepare_sandbox_cgroup(const plan::CgroupPlan& plan, const std::string& name);

// Parent side: a pids cgroup below cgroup_base, with pids.max set.
Result<PreparedCgroup> prepare_pids_cgroup(plan::ProcessLimitMechanism mechanism,
                                           const std::string& name, uint64_t max_processes);

// Child side: joins the cgroup by writing "0" to its join file. The caller must be single-threaded
// (v1 moves the writing thread). Returns 0 or an errno.
int apply_cgroup(int procs_fd) noexcept;

}  // namespace airlock::linux
