// The apply sequence: a supervisor process that starts the confined command, enforces the
// wall clock, kills every descendant when the command ends, and reports one fixed record.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/child_process.h"
#include "base/enum_names.h"
#include "base/error.h"
#include "linux/mounts.h"
#include "linux/rlimits.h"
#include "linux/userns.h"

namespace airlock::linux {

// The child's setup steps, in the order the sequencer runs them.
#define AIRLOCK_STEPS(X)                                                                          \
  X(None, "none") X(ParentDeath, "parent_death_signal") X(JoinCgroup, "join_cgroup")              \
  X(NewSession, "new_session") X(Subreaper, "subreaper") X(SignalSetup, "signal_setup")           \
  X(CloneCommand, "clone_command") X(Chdir, "chdir") X(Fds, "fds") X(Rlimits, "rlimits")          \
  X(NoNewPrivs, "no_new_privs") X(Landlock, "landlock") X(Seccomp, "seccomp") X(Exec, "exec")     \
  X(IdMaps, "id_maps") X(Mounts, "mounts") X(Hostname, "hostname") X(Loopback, "loopback")        \
  X(DropCapabilities, "drop_capabilities") X(Init, "init") X(Tmpdir, "tmpdir") X(Door, "door")
AIRLOCK_ENUM_OF(Step, int32_t, AIRLOCK_STEPS)

// The namespaces the namespaces tier's init is cloned into (a LaunchSpec with mounts and id maps),
// as the receipt names them; launch() in apply.cpp holds the matching CLONE_NEW* flags.
inline constexpr const char* kSandboxNamespaces[] = {"user", "mount", "pid", "net", "ipc", "uts", "cgroup"};

// Everything the child needs, prepared by the parent: pointers into memory the parent
// keeps alive until launch() returns, so the child allocates nothing.
struct LaunchSpec {
  std::string path;                 // absolute, or relative to cwd
  std::vector<std::string> argv;
  std::vector<std::string> env;     // "NAME=value"
  std::string cwd;
  const RlimitSet* rlimits = nullptr;
  int landlock_ruleset = -1;
  // The Landlock tier (no /proc of the sandbox's own): the command may read its own /proc/<pid>
  // (its maps, status, cgroup; runtimes such as JavaScriptCore stop without them), never another
  // process's. The rule is added by the command itself, on the directory /proc/self names for it.
  bool landlock_own_proc = false;
  const sock_fprog* seccomp = nullptr;
  std::array<int, 3> cgroup_procs = {-1, -1, -1};  // join files (PreparedCgroup::procs), -1: none
  // The namespaces tier: set together or not at all. The supervisor then starts an init in new
  // user, mount, pid, net, ipc, uts and cgroup namespaces, which builds the root and starts the command.
  const MountProgram* mounts = nullptr;
  const IdMaps* id_maps = nullptr;
  std::string hostname;
  bool drop_capabilities = false;
  // The network door (namespaces tier only): the init's end of the door channel, and where the
  // listening socket it sends out is bound inside. -1: no door.
  int door_channel = -1;
  std::string door_address;
  uint16_t door_port = 0;
  bool no_new_privs = true;
  uint64_t wall_timeout_ms = 0;     // 0: none
  uint64_t kill_grace_ms = 2000;
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1;  // -1: inherit
  int fd3 = -1;                                       // inherited as descriptor 3; -1: none
  // Made (mode 0700) by the command itself once confined, just before exec, in order: directories
  // (its TMPDIR, its HOME) that exist only inside the jail's own view of the scratch directory.
  std::vector<std::string> make_dirs;
  // Build the sandbox ahead of its command. launch() then runs every step up to the command
  // (supervisor and cgroup; on the namespaces tier also namespaces, root, loopback and door) and
  // the sandbox waits; start_warm() hands it exactly one command. The command's own fields (path, argv, env,
  // cwd, the four descriptors, make_dirs, wall_timeout_ms, kill_grace_ms) are then read from
  // start_warm's spec, never from this one, and the wall clock starts there.
  bool warm = false;
};

// The supervisor's one report. Fixed size: written with one write(2).
struct SupervisorReport {
  int32_t setup_failed = 0;
  Step step = Step::None;
  int32_t err = 0;
  int32_t exited = 0;  // 1: normal exit with exit_code; 0: killed by signal
  int32_t exit_code = 0;
  int32_t signal = 0;
  int32_t timed_out = 0;
  int32_t stopped = 0;  // the parent asked the supervisor to stop (kill switch)
  int64_t descendants_killed = 0;
  int64_t user_us = 0, system_us = 0, max_rss_kb = 0;
  // Bit r set: the supervisor's own rlimit r differed at the end from what it was before the
  // command started. Nothing inside may reach it; a set bit is a breach.
  uint32_t supervisor_limits_changed = 0;
  // A sandbox built ahead whose init ended before its command was handed over, with no setup
  // step failed (something killed it): the command never ran, and nothing else in the report holds.
  int32_t lost = 0;
};

struct Launched {
  ChildProcess supervisor;
  UniqueFd report;  // read end of the report pipe
  // A warm sandbox's: the supervisor's start (its wall clock) and the init's end for the command.
  // Closing them unused discards the sandbox: the supervisor kills the init and exits.
  UniqueFd go, command;
};

// Starts the supervisor, which starts the command. Parent side.
Result<Launched> launch(const LaunchSpec& spec);
// Hands a warm sandbox (launched from a spec with `warm` set) its one command: `spec`'s command
// fields; the rest of `spec` is ignored (the sandbox has it from its launch). Then wait_report as
// for any launch. A sandbox whose supervisor is gone is AIRLOCK_EXECUTOR_UNAVAILABLE; one whose
// setup failed reports that failure, as a cold launch does.
Result<void> start_warm(Launched& launched, const LaunchSpec& spec);
// Whether a warm sandbox still waits for its command: its supervisor has not ended.
bool waiting(const Launched& launched);
// Waits for the supervisor's report and reaps it.
Result<SupervisorReport> wait_report(Launched& launched);
// Asks the supervisor to stop the command and every descendant (SIGTERM, grace, SIGKILL).
Result<void> stop(const Launched& launched);

}  // namespace airlock::linux
