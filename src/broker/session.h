// Session: one governed unit of work: plan, view, executor, the five actions, receipts, kill switch.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/error.h"
#include "broker/approvals.h"
#include "broker/path_guard.h"
#include "broker/run_ledger.h"
#include "egress/door.h"
#include "egress/egress.h"
#include "exec/executor.h"
#include "exec/session_view.h"
#include "exec/tool_program.h"
#include "ledger/receipts.h"
#include "plan/host_facts.h"
#include "plan/plan.h"
#include "policy/task_policy.h"

namespace airlock::broker {

using Clock = std::function<std::chrono::steady_clock::time_point()>;

struct SessionOptions {
  SessionOptions(std::string state, plan::Profile p = plan::Profile::Production,
                 std::optional<std::string> ws = std::nullopt)
      : state_dir(std::move(state)), profile(p), workspace(std::move(ws)) {}
  std::string state_dir;                       // receipts/ and sessions/ live here
  plan::Profile profile = plan::Profile::Production;
  std::optional<std::string> workspace;        // overrides the policy's workspace
  // The session's id (`airlock run` gives its run's id in the store, so one id names both); a
  // fresh random one when absent. Lower-case hex, as random_id makes.
  std::optional<std::string> id;
  // Seams (STYLE.md rule 11): time for the rate limit and the budget, names for http_fetch.
  Clock clock = [] { return std::chrono::steady_clock::now(); };
  egress::Resolver resolver = egress::system_resolver();
  std::string ca_file;                         // http_fetch trust store; empty: the system's
  // An agent run (`airlock agent run`): its profile, executable, hashes and confinement, written
  // into the first receipt (session.open, or session.refused) as "agent". Null otherwise.
  Json agent;
  // An agent run's model gateway (egress::ModelGateway), served by the session's network door.
  std::optional<egress::ModelGateway> model_gateway;
  // The microvm tier's pool: guests booted ahead, each used for one command (the guest plan's pool).
  size_t vm_pool = 0;
  // The receipts file's bound: past it, refusals are only counted (refusals.suppressed) and no
  // action is admitted (AIRLOCK_CAPACITY_EXHAUSTED). 0: unbounded.
  uint64_t max_receipt_bytes = 0;
  // The run the session's json-protocol tool calls belong to (broker/run_ledger.h): their
  // idempotency keys derive from its keying and its effect ledger records each dispatch. The id
  // of an earlier run resumes it (same keying, same ledger, the orphaned call's step next);
  // absent, the session is a run of its own, named by the session's id.
  std::optional<std::string> run_id;
  // Fresh credentials for each json-protocol dispatch (`--credentials-command`), handed to that
  // call alone as `airlock tool call` hands them; none when absent. The operator's, never a policy's.
  std::optional<exec::CredentialProvider> credentials;
  // Build each next command's sandbox ahead while the session waits (exec::Executor::keep_warm):
  // for sessions that run many commands (`airlock serve`, `airlock mcp`, `airlock session`),
  // never for `airlock run`'s one.
  bool keep_warm = false;
};

// Refusals before an action is admitted (rate limit, killed, closed, budget, malformed
// requests) each get a receipt up to this many per minute; past it they are counted, and one
// refusals.suppressed receipt carries the count, the codes and the kinds (written when the
// minute ends, before the next action's receipt, and before session.close).
inline constexpr size_t kRefusalReceiptsPerMinute = 20;

// Where an action's changes stand (write_file, run_tool). Under write_back "immediate" they
// were written back to the workspace as the action completed: `landed` says what crossed and
// what was refused, `failed` why the write-back could not run. Under "on_close" they are in the
// session's view and land when the session closes normally (never when it is killed).
struct Landing {
  policy::WriteBack mode = policy::WriteBack::OnClose;
  std::optional<exec::WriteBackReport> landed;
  std::optional<Error> failed;
  Json to_json() const;
};

// What write_file returns: the file in the view, and where that change stands.
struct FileWriteResult : FileWritten {
  Landing landing;
};

// A json-protocol tool's dispatch: its result (the program's stdout as JSON), the key it was
// handed, its attempt in the run's effect ledger, and its step in the run.
struct LedgeredCall {
  Json result;
  std::string idempotency_key, attempt_id, run_id, ledger;
  uint64_t step = 0;
  std::string approval_id;  // the approval this dispatch used, when its tool requires one
};

// What run_tool returns: the tool's exit, its captured output (an argv tool's), its ledgered
// call (a json tool's), and where its changes stand.
struct ToolResult {
  exec::RunOutcome outcome;
  std::string out, err;
  Landing landing;
  std::optional<LedgeredCall> ledgered;
  Json to_json() const;
};

// Why a session closed normally, for its session.close receipt: who asked ("close request",
// "end of input") and the signal that asked, if one did ("SIGTERM").
struct CloseCause {
  std::string reason = "close request";
  std::string signal;
};

// Where receipts for a refused open go when no session exists: the same directory.
std::string receipts_dir(const std::string& state_dir);

// Asks the process that owns session `id` in `state_dir` to pull its kill switch (see
// Session::listen_for_operator_kill); `who` goes into the session.close receipt. Refused with
// AIRLOCK_SESSION_UNKNOWN when no live process owns such a session, AIRLOCK_CONFIG_ERROR when
// its owner takes no operator kill. Returns at once; the session ends as soon as its owner
// sees the request (a running tool is stopped first).
Result<pid_t> request_operator_kill(const std::string& state_dir, const std::string& id, const std::string& who);

class Session {
 public:
  // Plans, makes the view, prepares the executor and writes session.open (what enforced).
  // A refusal is returned as the error and recorded as a session.refused receipt, whose
  // path is in facts.receipts.
  static Result<std::unique_ptr<Session>> open(const policy::TaskPolicy& policy,
                                               const plan::HostFacts& facts, const SessionOptions& opts);
  ~Session();

  const std::string& id() const { return id_; }
  const std::string& state_dir() const { return state_dir_; }
  const plan::ExecutionPlan& plan() const { return plan_; }
  const exec::SessionDirs& dirs() const { return dirs_; }
  const std::string& receipts_path() const { return receipts_.path(); }
  const std::optional<std::string>& workspace() const { return workspace_; }
  const exec::Enforced& enforced() const { return executor_->enforced(); }

  // Runs the operator's command (not a declared tool) under the plan's executor and limits;
  // records tool.run with argv, exit, duration and resource use. The command's wall time is
  // also bounded by what is left of the session budget; a spent budget is
  // AIRLOCK_BUDGET_EXHAUSTED before anything runs.
  Result<exec::RunOutcome> run_command(const exec::Command& cmd);

  // The five actions an agent may ask for. Each is checked against the policy, refused with
  // a code or performed, and recorded as one receipt either way. Before the action's own
  // checks: a killed session refuses with AIRLOCK_SESSION_KILLED, a closed one with
  // AIRLOCK_SESSION_CLOSED, a spent budget with AIRLOCK_BUDGET_EXHAUSTED (and the kill
  // switch), more than max_actions_per_minute in the last minute with AIRLOCK_RATE_LIMITED.
  Result<FileRead> read_file(const std::string& path, uint64_t offset = 0,
                             std::optional<uint64_t> length = std::nullopt);
  // Under write_back "immediate", write_file and run_tool land their changes as they complete
  // (one write_back receipt each); what landed stays landed whatever happens to the session.
  Result<FileWriteResult> write_file(const std::string& path, std::string_view data);
  Result<Listing> list_dir(const std::string& path);
  Result<egress::FetchResponse> http_fetch(const egress::FetchRequest& req);
  // Runs a declared tool on the plan's executor, with the tool's timeout (bounded by the
  // session's budget) and output cap (bounded by the policy's). An argv tool runs its argv
  // prefix, plus `args` (an array of strings) only when the tool allows them. A json-protocol
  // tool is dispatched as `airlock tool call` dispatches it: `args` (an object, {} when null)
  // on one line to the program, the idempotency key derived from (run, step, 0, tool, args),
  // the intent in the run's effect ledger before the program starts and the outcome after;
  // `step` is the call's step in the run (default: the next, see RunLedger::take_step).
  Result<ToolResult> run_tool(const std::string& name, const Json& args, std::optional<uint64_t> step);
  Result<ToolResult> run_tool(const std::string& name, const std::vector<std::string>& args) {
    return run_tool(name, Json(args), std::nullopt);
  }

  // Records one request through the network door (called from the door's threads).
  void record_door(Json body);

  // Records a request refused before it reached an action (a malformed protocol request).
  Result<void> note_refusal(std::string_view kind, const Json& args, const Error& e);

  // The receipts written so far, oldest first.
  Result<std::vector<Json>> receipts() const;
  // What an operator lists (GET /v1/sessions): id, task, policy digest, executor and tier, age,
  // actions asked for so far and how many were refused, receipts written; the action running
  // now (its kind, for how long, and what its sandbox uses: Executor::usage_now), how the
  // session ended, and the CPU time and peak memory of its tool runs so far.
  Json status() const;
  // The tails of the last kOutputTailsKept tool runs' output (stdout, or a json tool's result,
  // and stderr; the last kOutputTailBytes of each, as text), by the seq of their run_tool
  // receipt; an ended session keeps its last kOutputTailsKeptEnded. Kept in memory for the
  // operator's console only: receipts hold the output's digest.
  Json output_tails() const;
  static constexpr size_t kOutputTailBytes = 2048, kOutputTailsKept = 64, kOutputTailsKeptEnded = 8;
  bool killed() const { return killed_; }
  // Closed or killed: no action will be admitted again.
  bool ended() const {
    std::lock_guard lk(mu_);
    return ended_;
  }
  // Test seam for the attack suite (see PathGuard::before_open).
  PathGuard& path_guard() { return *guard_; }

  // Ends the session: writes back when `write_back` (the caller decides what success is),
  // records session.close with what was written back, what was refused, and `cause`; removes
  // the view.
  Result<exec::WriteBackReport> close(bool write_back, const CloseCause& cause = {});
  // A budget that ran out while no action was asked for is spent all the same: the kill switch
  // (session.close how=killed, reason "budget exhausted") and AIRLOCK_BUDGET_EXHAUSTED. For
  // a verb to call before it closes a session that idled.
  Result<void> enforce_budget();
  // The kill switch, safe from any thread: a running tool is killed through its executor,
  // every later action is AIRLOCK_SESSION_KILLED, nothing is written back; session.close
  // records it (after the running action returns, if one is running).
  Result<void> kill(std::string_view why = "kill switch");
  // Asks a running command to stop, from any thread; the caller then closes or kills.
  void interrupt() { executor_->stop(); }

  // The operator's kill (`airlock session kill ID`) reaches the process that owns a session
  // through the session's directory: a request file, then SIGUSR1 to the owner. Only an owner
  // that said it listens (it takes SIGUSR1 from a signalfd) is signalled; a SIGUSR1 without a
  // request does nothing.
  Result<void> listen_for_operator_kill();
  // The request's reason ("operator kill by uid N"), when one was made.
  std::optional<std::string> operator_kill_requested() const;

 private:
  // Not open (ended_) until open() has made everything and written session.open.
  Session(std::string id, ledger::ReceiptLog receipts) : id_(std::move(id)), receipts_(std::move(receipts)) {}
  Result<void> finish(std::string_view how, Json body);
  // The checks every action passes first; on success the action is admitted and in flight.
  Result<void> admit(std::string_view kind, const Json& args);
  // Records the action's receipt, ends its flight, and completes a kill that arrived meanwhile.
  template <class T>
  Result<T> record(std::string_view kind, const Json& args, Result<T> r,
                   std::chrono::steady_clock::time_point started, const std::function<Json(const T&)>& summary);
  uint64_t spent_ms() const;
  // A json-protocol tool's dispatch, within run_tool (the action admitted).
  Result<ToolResult> call_json_tool(const policy::Tool& tool, const Json& args, std::optional<uint64_t> step);
  // A call to a tool that requires approval: the id of the approval one attempt of which it takes,
  // else AIRLOCK_APPROVAL_REQUIRED naming the request it is held as (approval.requested receipt),
  // or AIRLOCK_APPROVAL_DENIED while a person's denial of this call holds.
  Result<std::string> approval_for(const policy::Tool& tool, const Json& args, const std::string& args_sha256);
  // A run's wall-time limit: its own (`own_ms`, 0 for none), or what is left of the session's
  // budget when that is less (budget_binds). AIRLOCK_BUDGET_EXHAUSTED when nothing is left.
  struct Bound {
    uint64_t timeout_ms;
    bool budget_binds;
  };
  Result<Bound> bound_by_budget(uint64_t own_ms) const;
  // Under write_back "immediate": writes the view's changes back now, records write_back, and
  // moves the manifest on so that later landings (and close) see only later changes. Runs
  // while the action is in flight, so a kill waits for it before the view goes.
  Landing land(std::string_view after);
  // Records a refusal, or counts it when past kRefusalReceiptsPerMinute or the receipts bound
  // (mu_ held).
  Result<void> append_refusal(std::string_view kind, Json body, Code code);
  // Writes the refusals.suppressed receipt for what was counted, if anything was (mu_ held).
  Result<void> flush_suppressed();
  // The budget as kill switch (mu_ held): marks the session killed and ends it.
  Error exhaust_budget(uint64_t budget_ms, uint64_t spent);

  std::string id_;
  std::string state_dir_;
  std::string run_id_;
  std::optional<RunLedger> run_;  // opened at the first json-protocol call
  std::optional<exec::CredentialProvider> credentials_;
  plan::ExecutionPlan plan_;
  exec::SessionDirs dirs_;
  ledger::ReceiptLog receipts_;
  std::optional<std::string> workspace_;
  std::unique_ptr<exec::Executor> executor_;
  exec::ViewManifest manifest_;
  policy::TaskPolicy policy_;
  std::optional<PathGuard> guard_;
  Clock clock_;
  egress::Resolver resolver_;
  std::string ca_file_;
  std::chrono::steady_clock::time_point opened_at_;
  std::deque<std::chrono::steady_clock::time_point> recent_;  // admitted actions, last minute
  std::mutex action_mu_;   // one action at a time, in the order they arrive
  mutable std::mutex mu_;  // ended_, in_flight_, receipts_ (kill() takes it from any thread)
  bool ended_ = true;  // until open() succeeds
  bool in_flight_ = false;
  std::string in_flight_kind_;
  std::chrono::steady_clock::time_point in_flight_since_;
  std::string ended_how_, ended_reason_;  // from session.close
  uint64_t runs_cpu_us_ = 0, runs_peak_rss_kb_ = 0;
  struct OutputTail {
    uint64_t seq;
    std::string out, err;
  };
  std::deque<OutputTail> tails_;
  std::atomic<bool> killed_ = false;
  std::string kill_reason_;
  uint64_t max_receipt_bytes_ = 0;
  std::chrono::steady_clock::time_point refusal_window_;
  size_t refusals_in_window_ = 0;
  uint64_t actions_ = 0, refused_ = 0;  // every action asked for, and those refused (mu_)
  uint64_t suppressed_ = 0;
  std::map<std::string, uint64_t> suppressed_codes_, suppressed_kinds_;
};

}  // namespace airlock::broker
