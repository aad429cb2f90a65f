// Session: open (plan + view + executor + session.open), the five actions, close with write-back, kill.
#include "broker/session.h"

#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "base/encoding.h"
#include "base/fs.h"
#include "base/hash.h"
#include "egress/door.h"
#include "exec/captured_run.h"
#include "exec/owned_executor.h"
#include "exec/planner.h"
#include "exec/tool_program.h"

namespace airlock::broker {

std::string receipts_dir(const std::string& state_dir) { return state_dir + "/receipts"; }

namespace {

// The body every receipt of an open starts from: what was asked, on what host.
Json opening_record(const policy::TaskPolicy& pol, const plan::HostFacts& facts, const SessionOptions& opts,
                    const std::optional<std::string>& workspace) {
  Json j = {{"policy_digest", policy::digest(pol)},
            {"policy", policy::to_json(pol)},
            {"host_facts", plan::to_json(facts)},
            {"profile", plan::to_string(opts.profile)},
            {"workspace", workspace ? Json(*workspace) : Json(nullptr)}};
  if (!opts.agent.is_null()) j["agent"] = opts.agent;
  return j;
}

Result<void> check_workspace(const std::optional<std::string>& workspace, const std::string& state_dir) {
  struct stat st{};
  if (workspace && (::stat(workspace->c_str(), &st) < 0 || !S_ISDIR(st.st_mode)))
    return fail(Code::PolicyInvalid, fmt::format("the workspace {} is not a directory", *workspace),
                {{"workspace", *workspace}});
  // The state directory holds the receipts, the run store and the host facts the planner trusts:
  // a command that could write them back could rewrite its own record or weaken the next plan.
  char ws[PATH_MAX], state[PATH_MAX];
  if (workspace && ::realpath(workspace->c_str(), ws) && ::realpath(state_dir.c_str(), state)) {
    const std::string w = ws, sd = state;
    if (sd == w || w == "/" || sd.starts_with(w + "/"))
      return fail(Code::PolicyInvalid,
                  fmt::format("the workspace {} holds airlock's state directory {}: a command could rewrite its "
                              "receipts, the run store and the host facts; choose a workspace that does not "
                              "contain it (or another --state-dir)",
                              *workspace, sd),
                  {{"workspace", *workspace}, {"state_dir", sd}});
  }
  return {};
}

}  // namespace

// Open is a sequence of steps, each owning one concern: the receipt log first (so a refusal at
// any later step is recorded in it as session.refused), the plan, the sandbox
// (exec::build_owned_executor: the directories, the view, the executor, removed together if a
// later step fails), the path guard, then session.open. Until the last step the session is not
// open, and its destructor leaves the sandbox to the OwnedExecutor that holds it.
Result<std::unique_ptr<Session>> Session::open(const policy::TaskPolicy& pol, const plan::HostFacts& facts,
                                               const SessionOptions& opts) {
  // An id names a directory and a file: nothing but what random_id makes may reach the path.
  if (opts.id && (opts.id->empty() || opts.id->size() > 64 ||
                  opts.id->find_first_not_of("0123456789abcdef") != std::string::npos))
    return fail(Code::InternalError, fmt::format("\"{}\" cannot be a session id", opts.id->substr(0, 80)));
  std::string id = opts.id.value_or(random_id());
  TRY(make_dirs(receipts_dir(opts.state_dir)));
  auto log = TRY(ledger::ReceiptLog::create(receipts_dir(opts.state_dir) + "/" + id + ".jsonl", id));
  std::unique_ptr<Session> s(new Session(id, std::move(log)));
  s->policy_ = pol;
  s->clock_ = opts.clock;
  s->resolver_ = opts.resolver;
  s->ca_file_ = opts.ca_file;
  s->max_receipt_bytes_ = opts.max_receipt_bytes;
  s->state_dir_ = opts.state_dir;
  s->run_id_ = opts.run_id.value_or(id);
  s->credentials_ = opts.credentials;
  s->workspace_ = opts.workspace ? opts.workspace : pol.workspace;
  if (s->workspace_) s->workspace_ = absolute_path(*s->workspace_);
  const std::string workspace = s->workspace_.value_or("");

  Json record = opening_record(pol, facts, opts, s->workspace_);
  auto refused = [&](Error e) {
    Json body = record;
    body["decision"] = "refused";
    body["error"] = e.to_json();
    if (s->receipts_.append("session.refused", std::move(body))) e.facts["receipts"] = s->receipts_.path();
    return std::unexpected(std::move(e));
  };

  // The run its json-protocol tools are recorded under, and where (made at the first such call).
  record["run"] = {{"run_id", s->run_id_}, {"ledger", run_paths(opts.state_dir, s->run_id_).ledger}};
  if (auto ok = check_run_id(s->run_id_); !ok) return refused(ok.error());

  auto planned = exec::plan_session(pol, facts, {opts.profile, workspace, opts.vm_pool});
  if (!planned) return refused(planned.error());
  record["plan"] = plan::to_json(*planned);
  // Every receipt from here on names what confines the session and why it was chosen.
  s->receipts_.stamp("sandbox", {{"executor", policy::to_string(planned->executor())},
                                 {"tier", planned->tier()},
                                 {"reason", planned->why}});
  if (auto w = check_workspace(s->workspace_, opts.state_dir); !w) return refused(w.error());

  // The network door, when the plan has one: served by airlock for each run, its requests
  // recorded in this session's log.
  exec::DoorStarter door;
  const auto* ns_tier = std::get_if<plan::NamespacesTierPlan>(&planned->confinement);
  if (ns_tier && ns_tier->door)
    door = [rules = ns_tier->door->rules, resolver = opts.resolver, gateway = opts.model_gateway,
            raw = s.get()](UniqueFd listener) -> Result<std::shared_ptr<void>> {
      egress::DoorOptions d;
      d.rules = rules;
      d.resolve = resolver;
      d.record = [raw](Json j) { raw->record_door(std::move(j)); };
      d.gateway = gateway;
      return std::shared_ptr<void>(TRY(egress::DoorServer::start(std::move(d), std::move(listener))));
    };
  auto box = exec::build_owned_executor(std::move(*planned), opts.state_dir, id, workspace, std::move(door));
  if (!box) return refused(box.error());
  auto guard = PathGuard::open(box->dirs.view, box->plan.view_paths, box->plan.write_back_paths,
                               box->plan.denied_names, box->plan.protected_paths);
  if (!guard) return refused(guard.error());

  record["decision"] = "allowed";
  record["executor"] = policy::to_string(box->plan.executor());
  record["tier"] = box->plan.tier();
  record["landlock_abi"] = facts.landlock_abi;
  record["enforced"] = exec::to_json(box->executor->enforced());
  record["sandboxes_built_ahead"] = opts.keep_warm;
  record["view"] = {{"path", box->dirs.view}, {"copied", box->view.to_json()}};
  TRY(s->receipts_.append("session.open", std::move(record)));

  // Open: the session owns the sandbox from here, and its close or kill removes it.
  s->plan_ = std::move(box->plan);
  s->dirs_ = std::exchange(box->dirs, {});
  s->manifest_ = std::move(box->view.manifest);
  s->executor_ = std::move(box->executor);
  if (opts.keep_warm) s->executor_->keep_warm(true);
  s->guard_ = std::move(*guard);
  s->opened_at_ = s->clock_();
  s->refusal_window_ = s->opened_at_;
  s->ended_ = false;
  return s;
}

Json ToolResult::to_json() const {
  Json j = {{"outcome", outcome.to_json()}};
  auto put = [&](const char* key, const std::string& bytes) {
    if (is_valid_utf8(bytes))
      j[key] = bytes;
    else
      j[std::string(key) + "_base64"] = base64_encode(bytes);
  };
  if (ledgered) {
    j["result"] = ledgered->result;
    j["idempotency_key"] = ledgered->idempotency_key;
    j["attempt_id"] = ledgered->attempt_id;
    j["run_id"] = ledgered->run_id;
    j["step"] = ledgered->step;
    j["ledger"] = ledgered->ledger;
    if (!ledgered->approval_id.empty()) j["approval_id"] = ledgered->approval_id;
  } else {
    put("stdout", out);
    put("stderr", err);
  }
  j["write_back"] = landing.to_json();
  return j;
}

Result<Session::Bound> Session::bound_by_budget(uint64_t own_ms) const {
  uint64_t budget = plan_.limits.session_budget_ms;
  if (budget == 0) return Bound{own_ms, false};
  uint64_t spent = spent_ms();
  if (spent >= budget)
    return fail(Code::BudgetExhausted, fmt::format("the session's budget of {} s is spent", budget / 1000),
                {{"budget_ms", budget}, {"spent_ms", spent}});
  uint64_t left = budget - spent;
  if (own_ms == 0 || left < own_ms) return Bound{left, true};
  return Bound{own_ms, false};
}

uint64_t Session::spent_ms() const {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(clock_() - opened_at_).count());
}

Result<void> Session::admit(std::string_view kind, const Json& args) {
  std::unique_lock lk(mu_);
  auto refuse = [&](Error e) -> Result<void> {
    ++actions_;
    ++refused_;
    // A receipt that cannot be written is itself the refusal: nothing unrecorded happens.
    TRY(append_refusal(kind,
                       {{"args_digest", sha256_hex(lossless_canonical_json(args))},
                        {"args", args},
                        {"decision", "refused"},
                        {"error", e.to_json()}},
                       e.code));
    return std::unexpected(std::move(e));
  };
  if (killed_)
    return refuse(Error{Code::SessionKilled, fmt::format("the session was killed ({})", kill_reason_), {}});
  if (ended_) return refuse(Error{Code::SessionClosed, "the session is closed", {}});
  if (max_receipt_bytes_ && receipts_.bytes() >= max_receipt_bytes_)
    return refuse(Error{Code::CapacityExhausted,
                        fmt::format("the session's receipts hold {} bytes, the most allowed", receipts_.bytes()),
                        {{"receipt_bytes", receipts_.bytes()}, {"max_receipt_bytes", max_receipt_bytes_}}});
  uint64_t budget = plan_.limits.session_budget_ms;
  if (uint64_t spent = spent_ms(); budget && spent >= budget) {
    Error e{Code::BudgetExhausted, fmt::format("the session's budget of {} s is spent", budget / 1000),
            {{"budget_ms", budget}, {"spent_ms", spent}}};
    auto r = refuse(e);
    (void)exhaust_budget(budget, spent);
    return r;
  }
  auto now = clock_();
  while (!recent_.empty() && now - recent_.front() >= std::chrono::minutes(1)) recent_.pop_front();
  auto per_minute = static_cast<size_t>(policy_.limits.max_actions_per_minute);
  if (recent_.size() >= per_minute)
    return refuse(Error{Code::RateLimited,
                        fmt::format("{} actions in the last minute; the policy allows {}", recent_.size(), per_minute),
                        {{"limit_per_minute", per_minute}}});
  recent_.push_back(now);
  in_flight_ = true;
  in_flight_kind_ = std::string(kind);
  in_flight_since_ = now;
  return {};
}

Result<void> Session::append_refusal(std::string_view kind, Json body, Code code) {
  auto now = clock_();
  if (now - refusal_window_ >= std::chrono::minutes(1)) {
    TRY(flush_suppressed());
    refusal_window_ = now;
    refusals_in_window_ = 0;
  }
  bool over_bound = max_receipt_bytes_ && receipts_.bytes() >= max_receipt_bytes_;
  if (++refusals_in_window_ > kRefusalReceiptsPerMinute || over_bound) {
    ++suppressed_;
    ++suppressed_codes_[std::string(to_name(code))];
    ++suppressed_kinds_[std::string(kind)];
    return {};
  }
  TRY(receipts_.append(kind, std::move(body)));
  return {};
}

Result<void> Session::flush_suppressed() {
  if (!suppressed_) return {};
  Json body = {{"decision", "refused"},
               {"count", suppressed_},
               {"codes", suppressed_codes_},
               {"kinds", suppressed_kinds_},
               {"receipts_per_minute", kRefusalReceiptsPerMinute}};
  if (max_receipt_bytes_) body["max_receipt_bytes"] = max_receipt_bytes_;
  suppressed_ = 0;
  suppressed_codes_.clear();
  suppressed_kinds_.clear();
  TRY(receipts_.append("refusals.suppressed", std::move(body)));
  return {};
}

Result<void> Session::enforce_budget() {
  std::unique_lock lk(mu_);
  if (ended_) return {};
  uint64_t budget = static_cast<uint64_t>(policy_.limits.session_budget_seconds) * 1000;
  if (uint64_t spent = spent_ms(); budget && spent >= budget) return std::unexpected(exhaust_budget(budget, spent));
  return {};
}

Error Session::exhaust_budget(uint64_t budget, uint64_t spent) {
  // A spent budget pulls the kill switch: the session ends here, nothing more is written back.
  killed_ = true;
  kill_reason_ = "budget exhausted";
  executor_->stop();
  (void)finish("killed", {{"write_back", false}, {"reason", kill_reason_}});
  return Error{Code::BudgetExhausted, fmt::format("the session's budget of {} s is spent", budget / 1000),
               {{"budget_ms", budget}, {"spent_ms", spent}}};
}

Json Landing::to_json() const {
  Json j = {{"mode", policy::to_string(mode)}};
  if (mode == policy::WriteBack::OnClose) {
    j["landed"] = false;
    j["note"] = "the change is in the session's view; it lands in the workspace when the session closes "
                "normally, and never if the session is killed";
    return j;
  }
  j["landed"] = landed.has_value();
  if (landed) {
    j["written_back"] = landed->to_json();
    j["note"] = landed->refused.empty() ? "the change has landed in the workspace"
                                        : "the change has landed in the workspace except what was refused";
  }
  if (failed) {
    j["error"] = failed->to_json();
    j["note"] = "the write-back failed; the change is only in the session's view";
  }
  return j;
}

namespace {

// The manifest's notion of an entry (exec::create_view): what tells a later change from none.
std::optional<exec::ViewEntry> view_entry(const std::string& path) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) < 0) return std::nullopt;
  return exec::ViewEntry{S_ISDIR(st.st_mode), st.st_ino, st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec,
                         static_cast<uint64_t>(st.st_size)};
}

}  // namespace

Landing Session::land(std::string_view after) {
  Landing l{policy_.write_back, std::nullopt, std::nullopt};
  if (policy_.write_back != policy::WriteBack::Immediate || !workspace_ || killed_) return l;
  auto wb = exec::write_back(dirs_.view, *workspace_, manifest_, exec::view_rules(plan_));
  Json body = {{"after", after}, {"mode", policy::to_string(policy_.write_back)}};
  if (wb) {
    // What landed is now what the workspace and the view agree on.
    for (const auto& rel : wb->written)
      if (auto e = view_entry(dirs_.view + "/" + rel)) manifest_[rel] = *e;
    for (const auto& rel : wb->created_dirs)
      if (auto e = view_entry(dirs_.view + "/" + rel)) manifest_[rel] = *e;
    for (const auto& rel : wb->deleted) manifest_.erase(rel);
    for (const auto& rel : wb->kept) manifest_.erase(rel);
    body["written_back"] = wb->to_json();
    l.landed = std::move(*wb);
  } else {
    body["error"] = wb.error().to_json();
    l.failed = wb.error();
  }
  std::unique_lock lk(mu_);
  if (auto r = receipts_.append("write_back", std::move(body)); !r && !l.failed) l.failed = r.error();
  return l;
}

template <class T>
Result<T> Session::record(std::string_view kind, const Json& args, Result<T> r,
                          std::chrono::steady_clock::time_point started,
                          const std::function<Json(const T&)>& summary) {
  std::unique_lock lk(mu_);
  in_flight_ = false;
  if (r && killed_) r = std::unexpected(Error{Code::SessionKilled, "the session was killed during the action", {}});
  ++actions_;
  if (!r) ++refused_;
  Json body = {{"args_digest", sha256_hex(lossless_canonical_json(args))},
               {"args", args},
               {"decision", r ? "allowed" : "refused"},
               {"duration_us", std::chrono::duration_cast<std::chrono::microseconds>(clock_() - started).count()}};
  if (r)
    body["result"] = summary(*r);
  else
    body["error"] = r.error().to_json();
  Result<Json> appended = Json();
  if (auto flushed = flush_suppressed(); !flushed)
    appended = std::unexpected(flushed.error());
  else
    appended = receipts_.append(kind, std::move(body));
  if constexpr (std::is_same_v<T, ToolResult>) {
    if (r && appended) {
      const ToolResult& t = *r;
      runs_cpu_us_ += static_cast<uint64_t>(std::max<int64_t>(0, t.outcome.user_us + t.outcome.system_us));
      runs_peak_rss_kb_ = std::max<uint64_t>(runs_peak_rss_kb_, static_cast<uint64_t>(std::max<int64_t>(0, t.outcome.max_rss_kb)));
      auto tail = [](std::string_view bytes) {
        return std::string(bytes.substr(bytes.size() > kOutputTailBytes ? bytes.size() - kOutputTailBytes : 0));
      };
      // Raw bytes (made text when asked for): what is kept is bounded by their count.
      tails_.push_back({(*appended)["seq"].get<uint64_t>(),
                        tail(t.ledgered ? lossless_canonical_json(t.ledgered->result) : t.out), tail(t.err)});
      while (tails_.size() > kOutputTailsKept) tails_.pop_front();
    }
  }
  if (killed_ && !ended_) (void)finish("killed", {{"write_back", false}, {"reason", kill_reason_}});
  if (ended_) run_.reset();  // an ended session lets go of its run (finish could not: this action held it)
  if (!appended) return std::unexpected(appended.error());
  return r;
}

Result<FileRead> Session::read_file(const std::string& path, uint64_t offset, std::optional<uint64_t> length) {
  Json args = {{"path", path}, {"offset", offset}};
  if (length) args["length"] = *length;
  std::unique_lock one_at_a_time(action_mu_);
  auto started = clock_();
  TRY(admit("read_file", args));
  auto r = guard_->read(path, offset, length, static_cast<uint64_t>(policy_.limits.max_read_bytes));
  return record<FileRead>("read_file", args, std::move(r), started, [](const FileRead& f) {
    return Json{{"bytes", f.data.size()}, {"size", f.size}, {"sha256", sha256_hex(f.data)}};
  });
}

Result<FileWriteResult> Session::write_file(const std::string& path, std::string_view data) {
  // The receipt carries the content's digest and size, never the content.
  Json args = {{"path", path}, {"bytes", data.size()}, {"sha256", sha256_hex(data)}};
  std::unique_lock one_at_a_time(action_mu_);
  auto started = clock_();
  TRY(admit("write_file", args));
  Result<FileWriteResult> r = [&]() -> Result<FileWriteResult> {
    auto w = TRY(guard_->write(path, data, static_cast<uint64_t>(policy_.limits.max_write_bytes)));
    return FileWriteResult{w, land("write_file")};
  }();
  return record<FileWriteResult>("write_file", args, std::move(r), started, [](const FileWriteResult& w) {
    return Json{{"bytes", w.bytes}, {"created", w.created}, {"landed", w.landing.landed.has_value()}};
  });
}

Result<Listing> Session::list_dir(const std::string& path) {
  Json args = {{"path", path}};
  std::unique_lock one_at_a_time(action_mu_);
  auto started = clock_();
  TRY(admit("list_dir", args));
  auto r = guard_->list(path, static_cast<size_t>(policy_.limits.max_list_entries));
  return record<Listing>("list_dir", args, std::move(r), started, [](const Listing& l) {
    return Json{{"entries", l.entries.size()}, {"truncated", l.truncated}};
  });
}

Result<egress::FetchResponse> Session::http_fetch(const egress::FetchRequest& req) {
  Json args = {{"method", req.method}, {"url", req.url}, {"body_bytes", req.body.size()},
               {"body_sha256", sha256_hex(req.body)}};
  Json header_names = Json::array();
  for (const auto& h : req.headers) header_names.push_back(h.first);  // values may be secrets
  args["header_names"] = header_names;
  std::unique_lock one_at_a_time(action_mu_);
  auto started = clock_();
  TRY(admit("http_fetch", args));
  auto fetched = [&]() -> Result<egress::FetchResponse> {
    auto adm = TRY(egress::admit(policy_.egress, req.url, resolver_));
    egress::FetchLimits limits{static_cast<uint64_t>(policy_.limits.max_response_bytes),
                               static_cast<uint64_t>(policy_.limits.fetch_timeout_seconds) * 1000, ca_file_};
    auto resp = egress::fetch_pinned(adm, req, limits);
    if (!resp) {
      Error e = resp.error();
      e.facts["rule"] = adm.rule;
      return std::unexpected(e);
    }
    return resp;
  }();
  return record<egress::FetchResponse>("http_fetch", args, std::move(fetched), started,
                                       [](const egress::FetchResponse& f) {
                                         Json j = {{"status", f.status},
                                                   {"bytes", f.body.size()},
                                                   {"pinned_address", f.pinned_address},
                                                   {"sha256", sha256_hex(f.body)}};
                                         if (!f.redirect_to.empty()) j["redirect_not_followed"] = f.redirect_to;
                                         return j;
                                       });
}

Result<ToolResult> Session::run_tool(const std::string& name, const Json& args, std::optional<uint64_t> step) {
  // A json tool's arguments are recorded by digest and size (they may carry what only the tool
  // should see, as the ledger keeps only args_hash); an argv tool's as the argv they extend.
  Json a = {{"tool", name}};
  bool json_tool = std::any_of(policy_.tools.begin(), policy_.tools.end(), [&](const auto& t) {
    return t.name == name && t.protocol == policy::ToolProtocol::Json;
  });
  if (json_tool) {
    std::string canonical = lossless_canonical_json(args.is_null() ? Json::object() : args);
    a["args_sha256"] = sha256_hex(canonical);
    a["args_bytes"] = canonical.size();
  } else {
    a["args"] = args.is_null() ? Json::array() : args;
  }
  if (step) a["step"] = *step;
  std::unique_lock one_at_a_time(action_mu_);
  auto started = clock_();
  TRY(admit("run_tool", a));
  auto ran = [&]() -> Result<ToolResult> {
    auto tool = std::find_if(policy_.tools.begin(), policy_.tools.end(), [&](const auto& t) { return t.name == name; });
    if (tool == policy_.tools.end())
      return fail(Code::ToolNotDeclared, fmt::format("the policy declares no tool \"{}\"", name), {{"tool", name}});
    if (tool->protocol == policy::ToolProtocol::Json) return call_json_tool(*tool, args, step);
    if (!args.is_null() && !args.is_array())
      return fail(Code::ToolArgsDenied,
                  fmt::format("the tool \"{}\" runs an argv: its arguments are an array of strings", name),
                  {{"tool", name}});
    if (step)
      return fail(Code::ToolArgsDenied,
                  fmt::format("the tool \"{}\" runs an argv: a step keys only a json-protocol tool's call", name),
                  {{"tool", name}});
    std::vector<std::string> argv;
    for (const auto& v : args.is_null() ? Json::array() : args) {
      if (!v.is_string())
        return fail(Code::ToolArgsDenied, fmt::format("the tool \"{}\" takes arguments as strings", name),
                    {{"tool", name}});
      argv.push_back(v.get<std::string>());
    }
    if (!argv.empty() && !tool->allow_args)
      return fail(Code::ToolArgsDenied, fmt::format("the tool \"{}\" takes no arguments", name),
                  {{"tool", name}, {"args", argv.size()}});
    exec::Command cmd;
    cmd.argv = tool->argv;
    cmd.argv.insert(cmd.argv.end(), argv.begin(), argv.end());
    // The tool's own timeout, never past what is left of the session's budget.
    auto bound = TRY(bound_by_budget(static_cast<uint64_t>(tool->timeout_seconds) * 1000));
    uint64_t timeout = bound.timeout_ms;
    cmd.timeout_ms = timeout;
    // The tool's own cap, never more than the policy's limit for any tool.
    auto cap = static_cast<size_t>(std::min(tool->max_output_bytes, policy_.limits.max_output_bytes));
    auto run = TRY(exec::run_captured(*executor_, cmd, "", cap));
    run.outcome.budget_exhausted = run.outcome.timed_out && bound.budget_binds;
    Json facts = {{"tool", name}, {"outcome", run.outcome.to_json()}};
    if (run.output_limited)
      return fail(Code::OutputLimit,
                  fmt::format("the tool \"{}\" wrote more than {} bytes and was stopped", name, cap),
                  facts);
    if (run.outcome.stopped && killed_) return fail(Code::SessionKilled, "the session was killed", facts);
    if (run.outcome.budget_exhausted)
      return fail(Code::BudgetExhausted, "the session's budget ran out while the tool ran", facts);
    if (run.outcome.timed_out)
      return fail(Code::ToolTimeout, fmt::format("the tool \"{}\" ran past {} ms", name, timeout), facts);
    // What the tool changed lands now (under immediate), whatever its exit: at close it would.
    return ToolResult{std::move(run.outcome), std::move(run.out), std::move(run.err_tail), land("run_tool"), {}};
  }();
  return record<ToolResult>("run_tool", a, std::move(ran), started, [](const ToolResult& t) {
    Json j = {{"outcome", t.outcome.to_json()}, {"landed", t.landing.landed.has_value()}};
    if (t.ledgered) {
      j["idempotency_key"] = t.ledgered->idempotency_key;
      j["attempt_id"] = t.ledgered->attempt_id;
      j["run_id"] = t.ledgered->run_id;
      j["step"] = t.ledgered->step;
      if (!t.ledgered->approval_id.empty()) j["approval_id"] = t.ledgered->approval_id;
      j["result_sha256"] = sha256_hex(lossless_canonical_json(t.ledgered->result));
    } else {
      j["stdout_bytes"] = t.out.size();
      j["stdout_sha256"] = sha256_hex(t.out);
    }
    return j;
  });
}

Result<std::string> Session::approval_for(const policy::Tool& tool, const Json& args, const std::string& args_sha256) {
  Json definition = policy::to_json(tool);
  ApprovalBinding binding{run_id_, tool.name, args_sha256, sha256_hex(canonical_json(definition))};
  auto c = TRY(ApprovalStore(state_dir_).take_or_request(binding, id_, args, definition));
  {
    std::lock_guard lk(mu_);
    for (const auto& x : c.expired) TRY(receipts_.append("approval.expired", {{"approval", x.to_json(false)}}));
    if (c.created) TRY(receipts_.append("approval.requested", {{"approval", c.request->to_json(false)}}));
  }
  if (c.approved) return c.approved->id;
  Json facts = {{"run_id", run_id_}, {"tool", tool.name}, {"args_sha256", args_sha256}};
  if (c.denied) {
    facts["approval_id"] = c.denied->id;
    facts["denied_until"] = c.denied->expires_at;
    return fail(Code::ApprovalDenied,
                fmt::format("a person denied this exact call of \"{}\" (approval request {}); it will not run with "
                            "these arguments",
                            tool.name, c.denied->id),
                std::move(facts));
  }
  const Approval& r = *c.request;
  facts["approval_id"] = r.id;
  facts["expires_at"] = r.expires_at;
  return fail(Code::ApprovalRequired,
              fmt::format("the tool \"{}\" needs a person's approval of exactly this call; it is held as approval "
                          "request {}: approve it with `airlock approve {}` (or POST /v1/approvals/{} with the "
                          "operator's token), then call again with the same arguments",
                          tool.name, r.id, r.id, r.id),
              std::move(facts));
}

Result<ToolResult> Session::call_json_tool(const policy::Tool& tool, const Json& args, std::optional<uint64_t> step) {
  if (!args.is_null() && !args.is_object())
    return fail(Code::ToolArgsDenied,
                fmt::format("the tool \"{}\" speaks the json protocol: its arguments are one object", tool.name),
                {{"tool", tool.name}});
  Json call_args = args.is_null() ? Json::object() : args;
  std::string args_sha256;  // as the ledger's intent records it (exec::call_tool_program)
  try {
    args_sha256 = sha256_hex(canonical_json(call_args));
  } catch (const Json::exception& e) {
    return fail(Code::ToolArgsDenied, fmt::format("the arguments cannot be sent as JSON: {}", e.what()),
                {{"tool", tool.name}});
  }
  if (step && *step > kMaxStep)  // before an approval's attempt is taken for a call that cannot run
    return fail(Code::OptionInvalid, fmt::format("step {} is past the highest a call may name ({})", *step, kMaxStep),
                {{"step", *step}});
  if (!run_) run_.emplace(TRY(RunLedger::open(state_dir_, run_id_)));
  auto bound = TRY(bound_by_budget(static_cast<uint64_t>(tool.timeout_seconds) * 1000));
  std::string approval_id;
  if (tool.approval == policy::ToolApproval::Required) approval_id = TRY(approval_for(tool, call_args, args_sha256));
  const RunLedger::Call which{tool.name, args_sha256};
  uint64_t n = TRY(run_->take_step(step, which));
  auto key = TRY(ledger::derive_key(run_->keying(), {n, 0}, tool.name, call_args));
  exec::ToolCall call{&tool, call_args, key, run_id_, RunLedger::span_of(n)};
  call.approval_id = approval_id;
  call.timeout_ms = bound.timeout_ms;
  call.max_output_bytes = std::min(tool.max_output_bytes, policy_.limits.max_output_bytes);
  auto done = exec::call_tool_program(*executor_, dirs_, call, run_->ledger(), credentials_ ? &*credentials_ : nullptr);
  // A call stopped before it could end (killed, timed out, cut off) may have had its effect: its
  // step is the one its retry takes, under the same key.
  bool settled = done || RunLedger::settles(done.error().code);
  run_->settle(n, settled, which);
  if (!done) {
    Error e = std::move(done).error();
    e.facts["idempotency_key"] = key;
    e.facts["step"] = n;
    e.facts["run_id"] = run_id_;
    e.facts["settled"] = settled;
    if (!approval_id.empty()) e.facts["approval_id"] = approval_id;
    if (e.code == Code::ToolTimeout && bound.budget_binds) {
      e.code = Code::BudgetExhausted;
      e.message = "the session's budget ran out while the tool ran";
    }
    return std::unexpected(std::move(e));
  }
  LedgeredCall c{std::move(done->result), key, done->attempt_id, run_id_, run_->paths().ledger, n, approval_id};
  return ToolResult{std::move(done->outcome), {}, {}, land("run_tool"), std::move(c)};
}

void Session::record_door(Json body) {
  std::unique_lock lk(mu_);
  // A receipt that cannot be written breaks the log, and every later action is refused for it.
  (void)receipts_.append("door.request", std::move(body));
}

Result<void> Session::note_refusal(std::string_view kind, const Json& args, const Error& e) {
  std::unique_lock lk(mu_);
  ++actions_;
  ++refused_;
  return append_refusal(kind, {{"args_digest", sha256_hex(lossless_canonical_json(args))}, {"decision", "refused"}, {"error", e.to_json()}},
                        e.code);
}

Json Session::status() const {
  std::unique_lock lk(mu_);
  Json running = nullptr, ended = nullptr;
  if (in_flight_)
    running = {{"kind", in_flight_kind_},
               {"for_ms", std::chrono::duration_cast<std::chrono::milliseconds>(clock_() - in_flight_since_).count()},
               {"usage", executor_ ? executor_->usage_now() : Json(nullptr)}};
  if (ended_ && !ended_how_.empty()) ended = {{"how", ended_how_}, {"reason", ended_reason_}};
  return {{"session", id_},
          {"task_id", policy_.task_id},
          {"policy_digest", policy::digest(policy_)},
          {"executor", policy::to_string(plan_.executor())},
          {"tier", plan_.tier()},
          {"age_seconds", std::chrono::duration_cast<std::chrono::seconds>(clock_() - opened_at_).count()},
          {"actions", actions_},
          {"refused", refused_},
          {"receipts", receipts_.count()},
          {"killed", killed_.load()},
          {"running", std::move(running)},
          {"ended", std::move(ended)},
          {"tool_runs", {{"cpu_us", runs_cpu_us_}, {"peak_rss_kb", runs_peak_rss_kb_}}}};
}

Json Session::output_tails() const {
  std::unique_lock lk(mu_);
  Json out = Json::object();
  for (const auto& t : tails_) out[std::to_string(t.seq)] = {{"stdout", t.out}, {"stderr", t.err}};
  repair_utf8(out);  // shown as text: bytes that are not UTF-8 become U+FFFD
  return out;
}

Result<std::vector<Json>> Session::receipts() const {
  std::unique_lock lk(mu_);
  auto text = TRY(airlock::read_file(receipts_.path(), Code::LedgerCorrupt));
  std::vector<Json> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) break;
    out.push_back(TRY(parse_json(std::string_view(text).substr(start, end - start), Code::LedgerCorrupt, "a receipt",
                                 ledger::kReceiptLineLimits)));
    start = end + 1;
  }
  return out;
}

Session::~Session() {
  if (!ended_) (void)kill();
}

Result<exec::RunOutcome> Session::run_command(const exec::Command& cmd) {
  Json argv = cmd.argv;
  if (killed_ || ended_) {
    Error e = killed_ ? Error{Code::SessionKilled, "the session was killed", {}}
                      : Error{Code::SessionClosed, "the session is closed", {}};
    std::unique_lock lk(mu_);
    TRY(append_refusal("tool.run", {{"argv", argv}, {"decision", "refused"}, {"error", e.to_json()}}, e.code));
    return std::unexpected(std::move(e));
  }
  exec::Command bounded = cmd;
  auto bound = bound_by_budget(cmd.timeout_ms.value_or(plan_.limits.wall_timeout_ms));
  if (!bound) {
    TRY(receipts_.append("tool.run", {{"argv", argv}, {"decision", "refused"}, {"error", bound.error().to_json()}}));
    return std::unexpected(bound.error());
  }
  if (bound->budget_binds) bounded.timeout_ms = bound->timeout_ms;
  auto out = executor_->run(bounded);
  if (out) out->budget_exhausted = out->timed_out && bound->budget_binds;
  if (!out) {
    TRY(receipts_.append("tool.run", {{"argv", argv}, {"decision", "refused"}, {"error", out.error().to_json()}}));
    return out;
  }
  TRY(receipts_.append("tool.run", {{"argv", argv}, {"decision", "allowed"}, {"outcome", out->to_json()}}));
  return out;
}

Result<void> Session::finish(std::string_view how, Json body) {
  ended_ = true;
  // Nothing runs in an ended session: whatever the executor still holds (the microvm tier's
  // pooled guests, which share the view) ends before the view is removed.
  executor_->stop();
  // The run's ledger and lock, for the next session to resume; an action still in flight holds
  // them until it is recorded (record()).
  if (!in_flight_) run_.reset();
  body["how"] = how;
  ended_how_ = std::string(how);
  while (tails_.size() > kOutputTailsKeptEnded) tails_.pop_front();  // an ended session keeps fewer
  ended_reason_ = body.value("reason", Json("")).is_string() ? body.value("reason", std::string()) : std::string();
  (void)flush_suppressed();  // the count goes into the log before its last receipt
  auto removed = exec::remove_session_dirs(dirs_);
  body["view_removed"] = removed.has_value();
  auto appended = receipts_.append("session.close", std::move(body));
  // After the last receipt, so a client that ends airlock soon after closing has it: the
  // sandbox built ahead that stop() discarded is gone before close returns.
  executor_->wait_discarded();
  TRY(std::move(appended));
  return removed;
}

Result<exec::WriteBackReport> Session::close(bool write_back, const CloseCause& cause) {
  std::unique_lock lk(mu_);
  if (killed_ || ended_) {
    // Refused like any action on an ended session, and recorded like one (after session.close).
    Error e = killed_ ? Error{Code::SessionKilled, fmt::format("the session was killed ({})", kill_reason_), {}}
                      : Error{Code::SessionClosed, "the session is closed", {}};
    TRY(append_refusal("close", {{"decision", "refused"}, {"write_back", write_back}, {"error", e.to_json()}}, e.code));
    return std::unexpected(std::move(e));
  }
  exec::WriteBackReport rep;
  Json body = {{"write_back", write_back}, {"reason", cause.reason}};
  if (!cause.signal.empty()) body["signal"] = cause.signal;
  if (write_back) body["mode"] = policy::to_string(policy_.write_back);
  if (write_back && workspace_) {
    auto wb = exec::write_back(dirs_.view, *workspace_, manifest_, exec::view_rules(plan_));
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

namespace {
constexpr const char* kKillRequest = "/operator-kill";           // the request: who asked
constexpr const char* kKillListener = "/operator-kill.listens";  // the owner takes SIGUSR1
}  // namespace

Result<void> Session::listen_for_operator_kill() {
  return write_file_atomic(dirs_.root + kKillListener, "SIGUSR1\n", 0600);
}

std::optional<std::string> Session::operator_kill_requested() const {
  auto who = airlock::read_file(dirs_.root + kKillRequest);
  if (!who) return std::nullopt;
  std::string reason = who->substr(0, 200);
  while (!reason.empty() && (reason.back() == '\n' || reason.back() == ' ')) reason.pop_back();
  return reason.empty() ? "operator kill" : reason;
}

Result<pid_t> request_operator_kill(const std::string& state_dir, const std::string& id, const std::string& who) {
  // An id names a directory: nothing but what random_id makes may reach the path.
  if (id.empty() || id.size() > 64 || id.find_first_not_of("0123456789abcdef") != std::string::npos)
    return fail(Code::SessionUnknown, fmt::format("\"{}\" is not a session id", id.substr(0, 80)));
  std::string root = state_dir + "/sessions/" + id;
  auto owner = exec::live_session_owner(root);
  if (!owner)
    return fail(Code::SessionUnknown, fmt::format("no running session {} in {}", id, state_dir),
                {{"session", id}, {"state_dir", state_dir}});
  struct stat st{};
  if (::stat((root + kKillListener).c_str(), &st) < 0)
    return fail(Code::SessionUnknown,
                fmt::format("session {} is owned by pid {}, which takes no operator kill (`airlock mcp` and "
                            "`airlock session` do; a server's session is killed through its API)",
                            id, *owner),
                {{"session", id}, {"pid", *owner}});
  TRY(write_file_atomic(root + kKillRequest, who + "\n", 0600));
  if (::kill(*owner, SIGUSR1) < 0) return fail_errno(Code::IoError, fmt::format("signal pid {}", *owner), errno);
  return *owner;
}

Result<void> Session::kill(std::string_view why) {
  std::unique_lock lk(mu_);
  if (ended_) return {};
  if (!killed_) kill_reason_ = why;
  killed_ = true;
  executor_->stop();
  // A running action ends the session itself when it returns (Session::record): its view
  // must outlive the tool that works in it.
  if (in_flight_) return {};
  return finish("killed", {{"write_back", false}, {"reason", kill_reason_}});
}

}  // namespace airlock::broker
