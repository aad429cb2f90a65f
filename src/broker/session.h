// Session: one governed unit of work: plan, view, executor, receipts, write-back on close.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "base/error.h"
#include "exec/executor.h"
#include "exec/session_view.h"
#include "ledger/receipts.h"
#include "plan/host_facts.h"
#include "plan/plan.h"
#include "policy/task_policy.h"

namespace airlock::broker {

struct SessionOptions {
  std::string state_dir;                       // receipts/ and sessions/ live here
  plan::Profile profile = plan::Profile::Production;
  std::optional<std::string> workspace;        // overrides the policy's workspace
};

// Where receipts for a refused open go when no session exists: the same directory.
std::string receipts_dir(const std::string& state_dir);

class Session {
 public:
  // Plans, makes the view, prepares the executor and writes session.open (what enforced).
  // A refusal is returned as the error and recorded as a session.refused receipt, whose
  // path is in facts.receipts.
  static Result<std::unique_ptr<Session>> open(const policy::TaskPolicy& policy,
                                               const plan::HostFacts& facts, const SessionOptions& opts);
  ~Session();

  const std::string& id() const { return id_; }
  const plan::ExecutionPlan& plan() const { return plan_; }
  const exec::SessionDirs& dirs() const { return dirs_; }
  const std::string& receipts_path() const { return receipts_.path(); }
  const std::optional<std::string>& workspace() const { return workspace_; }
  const Json& enforced() const { return executor_->enforced(); }

  // Runs the operator's command (not a declared tool) under the plan's executor and limits;
  // records tool.run with argv, exit, duration and resource use. The command's wall time is
  // also bounded by what is left of the session budget; a spent budget is
  // AIRLOCK_BUDGET_EXHAUSTED before anything runs.
  Result<exec::RunOutcome> run_command(const exec::Command& cmd);

  // Ends the session: writes back when `write_back` (the caller decides what success is),
  // records session.close with what was written back and what was refused, removes the view.
  Result<exec::WriteBackReport> close(bool write_back);
  // Stops any running command; nothing is written back; records session.close as killed.
  Result<void> kill();
  // Asks a running command to stop, from any thread; the caller then closes or kills.
  void interrupt() { executor_->stop(); }

 private:
  Session(std::string id, plan::ExecutionPlan plan, exec::SessionDirs dirs, ledger::ReceiptLog receipts)
      : id_(std::move(id)), plan_(std::move(plan)), dirs_(std::move(dirs)), receipts_(std::move(receipts)) {}
  Result<void> finish(std::string_view how, Json body);

  std::string id_;
  plan::ExecutionPlan plan_;
  exec::SessionDirs dirs_;
  ledger::ReceiptLog receipts_;
  std::optional<std::string> workspace_;
  std::unique_ptr<exec::Executor> executor_;
  exec::ViewManifest manifest_;
  std::chrono::steady_clock::time_point opened_at_ = std::chrono::steady_clock::now();
  bool ended_ = false;
};

}  // namespace airlock::broker
