// Session: open (plan + view + executor + session.open), run, close with write-back, kill.
#include "broker/session.h"

#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/hash.h"
#include "linux/cgroup.h"

namespace airlock::broker {

std::string receipts_dir(const std::string& state_dir) { return state_dir + "/receipts"; }

namespace {

Json view_copy_json(const exec::ViewCopy& c) {
  return {{"files", c.files}, {"bytes", c.bytes}, {"skipped", c.skipped}};
}

// Records a refused open in its own receipts file, so a refusal leaves a trace too.
Error record_refusal(Error e, const std::string& state_dir, const std::string& id, const Json& body) {
  auto log = ledger::ReceiptLog::create(receipts_dir(state_dir) + "/" + id + ".jsonl", id);
  if (!log) return e;
  Json b = body;
  b["decision"] = "refused";
  b["error"] = e.to_json();
  if (log->append("session.refused", b)) e.facts["receipts"] = log->path();
  return e;
}

}  // namespace

Result<std::unique_ptr<Session>> Session::open(const policy::TaskPolicy& pol, const plan::HostFacts& facts,
                                               const SessionOptions& opts) {
  std::string id = random_id();
  TRY(make_dirs(receipts_dir(opts.state_dir)));
  // What an airlock killed with SIGKILL left behind: its view, its cgroups.
  linux::release_abandoned_cgroups(exec::sweep_abandoned_sessions(opts.state_dir));
  std::optional<std::string> workspace = opts.workspace ? opts.workspace : pol.workspace;
  if (workspace) workspace = absolute_path(*workspace);
  Json base = {{"policy_digest", policy::digest(pol)},
               {"policy", policy::to_json(pol)},
               {"host_facts", plan::to_json(facts)},
               {"profile", plan::to_string(opts.profile)},
               {"workspace", workspace ? Json(*workspace) : Json(nullptr)}};

  auto planned = plan::plan_execution(pol, facts, opts.profile);
  if (!planned) return std::unexpected(record_refusal(planned.error(), opts.state_dir, id, base));
  base["plan"] = plan::to_json(*planned);

  if (workspace) {
    struct stat st{};
    if (::stat(workspace->c_str(), &st) < 0 || !S_ISDIR(st.st_mode))
      return std::unexpected(record_refusal(
          Error{Code::PolicyInvalid, fmt::format("the workspace {} is not a directory", *workspace),
                {{"workspace", *workspace}}},
          opts.state_dir, id, base));
  }

  auto dirs = exec::make_session_dirs(opts.state_dir, id);
  if (!dirs) return std::unexpected(record_refusal(dirs.error(), opts.state_dir, id, base));
  auto cleanup = [&] { (void)exec::remove_session_dirs(*dirs); };

  auto copy = exec::create_view(workspace.value_or(""), dirs->view, planned->view_paths, planned->write_back_paths);
  if (!copy) {
    cleanup();
    return std::unexpected(record_refusal(copy.error(), opts.state_dir, id, base));
  }
  auto executor = exec::make_executor(*planned, *dirs, id, workspace.value_or(""));
  if (!executor) {
    cleanup();
    return std::unexpected(record_refusal(executor.error(), opts.state_dir, id, base));
  }
  auto log = ledger::ReceiptLog::create(receipts_dir(opts.state_dir) + "/" + id + ".jsonl", id);
  if (!log) {
    cleanup();
    return std::unexpected(log.error());
  }
  Json open_body = base;
  open_body["decision"] = "allowed";
  open_body["executor"] = policy::to_string(planned->executor);
  open_body["tier"] = planned->tier;
  open_body["landlock_abi"] = facts.landlock_abi;
  open_body["enforced"] = (*executor)->enforced();
  open_body["view"] = {{"path", dirs->view}, {"copied", view_copy_json(*copy)}};
  if (auto r = log->append("session.open", open_body); !r) {
    cleanup();
    return std::unexpected(r.error());
  }
  std::unique_ptr<Session> s(new Session(id, std::move(*planned), std::move(*dirs), std::move(*log)));
  s->workspace_ = workspace;
  s->executor_ = std::move(*executor);
  s->manifest_ = std::move(copy->manifest);
  return s;
}

Session::~Session() {
  if (!ended_) (void)kill();
}

Result<exec::RunOutcome> Session::run_command(const exec::Command& cmd) {
  if (ended_) return fail(Code::SessionClosed, "the session is closed");
  Json argv = cmd.argv;
  exec::Command bounded = cmd;
  bool budget_binds = false;
  if (uint64_t budget = plan_.limits.session_budget_ms) {
    auto spent = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - opened_at_).count());
    if (spent >= budget) {
      Error e{Code::BudgetExhausted, fmt::format("the session's budget of {} s is spent", budget / 1000),
              {{"budget_ms", budget}, {"spent_ms", spent}}};
      TRY(receipts_.append("tool.run", {{"argv", argv}, {"decision", "refused"}, {"error", e.to_json()}}));
      return std::unexpected(e);
    }
    uint64_t left = budget - spent;
    uint64_t own = cmd.timeout_ms.value_or(plan_.limits.wall_timeout_ms);
    if (own == 0 || left < own) {
      bounded.timeout_ms = left;
      budget_binds = true;
    }
  }
  auto out = executor_->run(bounded);
  if (out && out->timed_out && budget_binds) out->budget_exhausted = true;
  if (!out) {
    TRY(receipts_.append("tool.run", {{"argv", argv}, {"decision", "refused"}, {"error", out.error().to_json()}}));
    return out;
  }
  TRY(receipts_.append("tool.run", {{"argv", argv}, {"decision", "allowed"}, {"outcome", out->to_json()}}));
  return out;
}

Result<void> Session::finish(std::string_view how, Json body) {
  ended_ = true;
  body["how"] = how;
  auto removed = exec::remove_session_dirs(dirs_);
  body["view_removed"] = removed.has_value();
  TRY(receipts_.append("session.close", std::move(body)));
  return removed;
}

Result<exec::WriteBackReport> Session::close(bool write_back) {
  if (ended_) return fail(Code::SessionClosed, "the session is closed");
  exec::WriteBackReport rep;
  Json body = {{"write_back", write_back}};
  if (write_back && workspace_) {
    auto wb = exec::write_back(dirs_.view, *workspace_, manifest_, plan_.write_back_paths);
    if (!wb) {
      body["error"] = wb.error().to_json();
      (void)finish("closed", body);
      return std::unexpected(wb.error());
    }
    rep = std::move(*wb);
    body["written_back"] = rep.to_json();
  }
  TRY(finish("closed", body));
  return rep;
}

Result<void> Session::kill() {
  if (ended_) return {};
  executor_->stop();
  return finish("killed", {{"write_back", false}});
}

}  // namespace airlock::broker
