// Executor: runs one command under a session's plan. The broker knows executors only through this.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/child_process.h"
#include "base/error.h"
#include "base/json_util.h"
#include "base/unique_fd.h"
#include "exec/enforced.h"
#include "exec/session_view.h"
#include "plan/plan.h"

namespace airlock::exec {

struct Command {
  std::vector<std::string> argv;  // argv[0]: absolute, or resolved against the trusted PATH
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1;  // -1: inherit
  std::optional<uint64_t> timeout_ms;                 // narrower than the plan's, never wider
  // The working directory, as a host path inside the session's view or scratch directory (the
  // executor shows it where the sandbox sees those); "" is the view's root.
  std::string cwd;
  // Variables ("NAME=value") added to the executor's own allow-listed environment.
  std::vector<std::string> env;
  // A descriptor the command inherits as fd 3 (-1: none), e.g. a pipe carrying credentials.
  int pass_fd = -1;
  // Variable names removed from the final environment, whatever put them there (the plan's
  // pass-through, `env` above): credential variables never reach the command by name.
  std::vector<std::string> scrub_env;
  // TMPDIR and HOME are fresh directories in the scratch directory that the command makes itself
  // once confined (linux::LaunchSpec::make_dirs), instead of the scratch directory and the view:
  // what an agent CLI writes for itself (its configuration, caches) never lands in the workspace,
  // and is discarded with the session.
  bool private_dirs = false;
};

struct RunOutcome {
  std::string program;  // what was executed
  ExitStatus status;
  bool timed_out = false;
  bool budget_exhausted = false;  // the session's budget, not the command's own limit, ran out
  bool stopped = false;  // stopped on request (kill switch)
  int64_t descendants_killed = 0;
  double wall_ms = 0;
  int64_t user_us = 0, system_us = 0, max_rss_kb = 0;
  // The rlimits of airlock's supervisor (RLIMIT_* names) that something changed while the command
  // ran: empty unless the command reached them.
  std::vector<std::string> supervisor_limits_changed;
  // Teardown, verified: the sandbox's cgroups empty and removed, nothing of it mounted on the host.
  double teardown_ms = 0;
  bool teardown_verified = false;
  // The sandbox was built ahead, while the session waited (Executor::keep_warm), rather than for
  // this command once it came: the same steps, at another time.
  bool built_ahead = false;
  Json to_json() const;
};

class Executor {
 public:
  virtual ~Executor() = default;
  // What this executor enforces, measured when it was prepared (session.open records it).
  virtual const Enforced& enforced() const = 0;
  // Runs `cmd` to completion under the plan. Setup failures in the child are
  // AIRLOCK_EXECUTOR_UNAVAILABLE naming the step and errno, never a silent unconfined run.
  virtual Result<RunOutcome> run(const Command& cmd) = 0;
  // Asks a running command to stop (SIGTERM, grace, SIGKILL); safe from another thread.
  virtual void stop() = 0;
  // Stops only the command running now (an output flood): later runs are not affected, unlike
  // stop(), which also refuses every later run. Safe from another thread while run() is in
  // progress. The default is stop(): an executor without a narrower stop fails closed.
  virtual void stop_run() { stop(); }
  // What the command running now uses, from its sandbox's own counters: memory_bytes,
  // processes, cpu_us (each null where this tier does not count it); null when nothing runs.
  // Safe from another thread while run() is in progress.
  virtual Json usage_now() { return nullptr; }
  // Builds each next command's sandbox ahead, in the background, while the session waits for its
  // next command: everything but the command (the supervisor and its cgroup; on the namespaces
  // tier also namespaces, root, loopback, door), each used for exactly one command and then destroyed. The same
  // steps as a sandbox built on demand; a tier that cannot build ahead ignores this. Off by
  // default: a caller that runs one command would only build a second sandbox for nothing.
  virtual void keep_warm(bool) {}
  // Returns once every sandbox built ahead that stop() discarded is gone (its processes reaped,
  // its cgroups removed): stop() itself only tells them to end.
  virtual void wait_discarded() {}
};

// Serves a plan's network door: given the listening socket made inside the sandbox's network
// namespace, starts serving it and returns a handle whose destruction stops serving (every
// connection closed, every thread joined). The broker supplies it; the executor knows only that
// a socket needs a server.
using DoorStarter = std::function<Result<std::shared_ptr<void>>(UniqueFd listener)>;

// Prepares an executor for a plan of its tier: the executor's parent-side steps run now, so a tier
// whose kernel mechanism cannot prepare is refused here. `workspace` is the workspace's host path
// ("" for none): the namespaces and microvm tiers show the view there. A plan with a door needs
// `door`; without one it is refused, never run with the door missing.
using ExecutorFactory = Result<std::unique_ptr<Executor>> (*)(const plan::ExecutionPlan& plan, const SessionDirs& dirs,
                                                               const std::string& session_id,
                                                               const std::string& workspace, DoorStarter door);

// The executor registry: one row per tier this build implements, in order of isolation (host,
// landlock, namespaces, microvm). Everything that lists the built tiers derives from it:
// make_executor, built_tiers() (which the planner is given), doctor and GET /v1/executors, the
// escape suite. A tier the policy format names but no row implements (container) is planned as
// unavailable, by name.
struct ExecutorEntry {
  policy::ExecutorKind kind;
  ExecutorFactory make;
};
std::span<const ExecutorEntry> executors();

// The tiers of the registry, for plan::plan_execution, plan::assess and plan::fact_needs.
plan::BuiltTiers built_tiers();

// Prepares the executor the plan chose for this session, through the registry. Fails closed: a
// tier no row implements, or one whose kernel mechanism fails to prepare, is refused.
Result<std::unique_ptr<Executor>> make_executor(const plan::ExecutionPlan& plan, const SessionDirs& dirs,
                                                const std::string& session_id, const std::string& workspace,
                                                DoorStarter door = {});

// Where the namespaces and microvm tiers show the view: at the workspace's own path, unless that
// path lies beneath something the new root provides itself (/tmp is the writable scratch
// directory, and Landlock grants a mount point's ancestors' rights to what is mounted there).
std::string workspace_inside(const std::string& workspace);

// Where a host path in the session's view or scratch directory appears inside the sandbox: a
// tier with a root of its own shows the scratch directory at /tmp and the view at `inside`;
// without one (nullopt) host paths are what the command sees. "" is the view's root. Anything
// else is not visible in the sandbox at all: AIRLOCK_POLICY_INVALID.
Result<std::string> sandbox_path(const std::string& host, const SessionDirs& dirs,
                                 const std::optional<std::string>& inside);

// The command's environment: the trusted PATH, HOME (the view), TMPDIR, PWD, AIRLOCK_SESSION and
// the plan's pass-through variables that are set here.
std::vector<std::string> sandbox_environment(const plan::ExecutionPlan& plan, const std::string& home,
                                             const std::string& tmp, const std::string& pwd,
                                             const std::string& session_id);

// Resolves a program name against policy::kTrustedPath (names with a slash are kept). A program
// that is not there, or not executable, is command_not_started's refusal.
Result<std::string> resolve_program(const std::string& name, const std::string& cwd);

// The refusal for a command that never started because exec (or the check before it) failed with
// `err`: AIRLOCK_TOOL_FAILED, the errno in its facts, and the status a shell gives such a command
// (not_started_status).
Error command_not_started(const std::string& program, std::string message, int err);
// What a shell exits with for a command it could not start, when `e` is command_not_started's:
// 127 when the program is not there (ENOENT, ENOTDIR), 126 when it is but cannot be executed (no
// execute permission, a directory, not an executable format). nullopt for any other error.
std::optional<int> not_started_status(const Error& e);

}  // namespace airlock::exec
