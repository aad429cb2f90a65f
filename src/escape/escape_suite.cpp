// The escape suite: each scenario (escape/scenarios.inc) run through broker::Session in each
// executor, its probe copied into the workspace, judged by the scenario's own judge; the tiers,
// the verdicts and the report.
#include "escape/escape_suite.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>

#include "base/unique_fd.h"
#include "broker/session.h"
#include "escape/canaries.h"
#include "escape/scenario.h"
#include "base/fs.h"
#include "exec/container_engine.h"
#include "exec/executor.h"
#include "exec/planner.h"

namespace airlock::escape {

using policy::ExecutorKind;

// Each row's host half (escape/scenarios/<name>.cpp).
namespace scenarios {
#define AIRLOCK_SCENARIO(enumerator, name, policy) \
  namespace name {                                 \
  std::unique_ptr<Scenario> make();                \
  }
#include "escape/scenarios.inc"
}  // namespace scenarios

namespace {

// The table, escape/scenarios.inc.
enum class Policy { Suite, Door };

struct Row {
  Breach breach;
  std::string_view name;
  Policy policy;
  std::unique_ptr<Scenario> (*make)();
};

constexpr Row kRows[] = {
#define AIRLOCK_SCENARIO(enumerator, name, policy) \
  {Breach::enumerator, #name, Policy::policy, &scenarios::name::make},
#include "escape/scenarios.inc"
};

constexpr Breach kBreaches[] = {
#define AIRLOCK_SCENARIO(enumerator, name, policy) Breach::enumerator,
#include "escape/scenarios.inc"
};

// The enumerators follow the rows, so a breach is its row's index.
const Row& row(Breach b) { return kRows[static_cast<size_t>(b)]; }
static_assert([] {
  for (size_t i = 0; i < std::size(kRows); ++i)
    if (static_cast<size_t>(kRows[i].breach) != i) return false;
  return true;
}());

// How much of its output the suite reads back from a probe.
constexpr size_t kMaxOutput = 64 * 1024;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// kProbeProgram beside the running executable, where the build and an install put it.
std::string probe_beside_self() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / kProbeProgram).string();
}

std::string read_back(int fd) {
  std::string out;
  char buf[8192];
  if (::lseek(fd, 0, SEEK_SET) < 0) return out;
  while (out.size() < kMaxOutput) {
    ssize_t n = ::read(fd, buf, std::min(sizeof buf, kMaxOutput - out.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// The policy every scenario of one executor runs under: the whole workspace readable, out/ the
// one write-back path, and the limits of a real tier (or the host baseline's wider ones). The door
// probes' policy adds a door (code_network allowlist) to the suite's allowed server alone: by name
// (allow_private: it is on loopback) and by range (127.0.0.1/32, which kDoorRebindHost's first
// answer falls in and its second does not).
// On the container tier the image is the suite's own (ensure_container_image): links to the
// host's /usr, which is bound read-only, so the probe program runs there as on every tier.
Result<policy::TaskPolicy> suite_policy(ExecutorKind e, const std::string& image, const DoorBait* door = nullptr) {
  const SuiteLimits& l = e == ExecutorKind::Host ? kHostBaselineLimits : kTierLimits;
  Json doc = {{"schema_version", std::string(policy::kSchemaVersion)},
              {"task_id", "escape-suite"},
              {"executor", std::string(policy::to_string(e))},
              {"readable", Json::array({"."})},
              {"write_back_paths", Json::array({"out"})},
              {"limits",
               {{"memory_mb", l.memory_mb},
                {"cpu_seconds", l.cpu_seconds},
                {"max_processes", l.max_processes},
                {"command_timeout_seconds", l.command_timeout_seconds}}}};
  if (e == ExecutorKind::Container && !image.empty()) {
    doc["image"] = image;
    doc["read_only_paths"] = Json::array({"/usr"});
  }
  if (door) {
    Json ports = Json::array({door->http_port}), schemes = Json::array({"http", "https"});
    doc["code_network"] = {
        {"mode", "allowlist"},
        {"rules", Json::array({{{"host", std::string(kDoorAllowedHost)},
                                {"ports", ports},
                                {"schemes", schemes},
                                {"allow_private", true}},
                               {{"cidr", "127.0.0.1/32"}, {"ports", ports}, {"schemes", schemes}}})}};
  }
  return policy::parse_layer(doc, policy::builtin_default());
}

// The suite's image for the container tier: directories and links to /usr (bin, sbin, lib, lib64),
// which the suite's policy binds read-only from the host. Made once per state directory and reused;
// "" when it cannot be made (the tier is then refused by name: the policy names no image).
std::string ensure_container_image(const std::string& state_dir) {
  constexpr std::string_view kName = "localhost/airlock-escape-suite";
  if (auto images = exec::list_images(state_dir))
    for (const auto& i : *images)
      if (i.reference.starts_with(std::string(kName) + "@")) return i.reference;
  char tmpl[] = "/tmp/airlock-suite-image-XXXXXX";
  if (!::mkdtemp(tmpl)) return "";
  std::string dir = tmpl;
  for (const char* d : {"usr", "etc", "tmp", "work", "proc", "dev", "sys"}) ::mkdir((dir + "/" + d).c_str(), 0755);
  for (const char* l : {"bin", "sbin", "lib", "lib64"}) (void)!::symlink((std::string("usr/") + l).c_str(), (dir + "/" + l).c_str());
  auto built = exec::build_image_from_dir(state_dir, std::string(kName), dir);
  (void)remove_tree(dir);
  return built ? built->reference : "";
}

// A refusal that says only "this build has no such executor" (every tier considered says so).
bool only_not_in_build(const Error& e) {
  if (e.code != Code::ExecutorUnavailable || !e.facts.contains("considered")) return false;
  const Json& c = e.facts["considered"];
  if (!c.is_array() || c.empty()) return false;
  return std::all_of(c.begin(), c.end(), [](const Json& x) {
    return x.contains("reason") && x["reason"].is_string() &&
           has(x["reason"].get<std::string>(), "no executor implements");  // plan::assess's words
  });
}

struct TierContext {
  const policy::TaskPolicy& policy;
  const policy::TaskPolicy* door_policy;     // the door probes' policy, when this tier could plan it
  const std::optional<Error>& door_refusal;  // ... or why it could not
  const plan::HostFacts& facts;
  const SuiteOptions& opts;
  Canaries& canaries;
  std::function<void(broker::Session*)> track;  // the session a cancel() must interrupt
};

// The door resolves the suite's names as its DNS responder does; both start afresh for each door
// scenario, and nothing an earlier scenario left at the door's bait counts for the next.
void forget_door_traffic(Canaries& c) {
  c.reset_names();
  (void)c.take_requests(false);
  (void)c.take_requests(true);
  (void)c.take_dns_queries();
  (void)c.take_datagrams();
  (void)c.take_connections();
}

// The result of a run the probe was started in: the judge's verdict, unless the probe never
// started, and everything the suite saw, as details.
void conclude(ScenarioResult& r, const Observed& o, Judged j, const std::string& name) {
  bool claimed = o.probe && o.probe->breached;
  if (claimed && !j.breached && !j.staged)
    j.evidence +=
        "; the probe's success did not reach the host (inside the executor the name means something else)";
  if (o.probe && !o.probe->breached && j.breached)
    j.evidence += "; the host saw a breach the probe did not report";

  bool started = has(o.errors, probe_started_line(name));
  r.evidence = j.evidence;
  if (j.breached) {
    r.verdict = Verdict::Breached;
  } else if (started) {
    r.verdict = Verdict::Contained;
  } else {
    // Nothing was attempted, so nothing was contained: the executor could not even run the probe.
    r.verdict = Verdict::Inconclusive;
    r.error = Error{Code::ToolFailed, "the probe did not start: " + o.probe_said(), {}};
    r.evidence = fmt::format("INCONCLUSIVE: the probe never started; {}", j.evidence);
  }
  r.details["probe_started"] = started;
  const std::vector<pid_t>& left = o.left_behind;
  if (!left.empty()) r.evidence += fmt::format("; killed after close: pid {}", fmt::join(left, ", "));
  r.details["probe"] = o.probe ? o.probe->to_json() : Json(nullptr);
  r.details["host_check"] = j.host;
  r.details["outcome"] = o.outcome ? o.outcome->to_json() : Json(nullptr);
  r.details["run_error"] = o.run_error ? o.run_error->to_json() : Json(nullptr);
  r.details["write_back"] = o.write_back ? o.write_back->to_json() : Json(nullptr);
  r.details["close_error"] = o.close_error ? o.close_error->to_json() : Json(nullptr);
  r.details["left_behind"] = left;
  if (!o.probe || !started) r.details["stderr"] = o.errors.substr(0, 2000);
}

ScenarioResult run_one(Breach b, TierContext& t) {
  auto t0 = std::chrono::steady_clock::now();
  ScenarioResult r;
  r.breach = b;
  std::string name(to_string(b));
  const Bait& bait = t.canaries.bait();
  auto not_run = [&](Error e) {
    r.verdict = Verdict::Unavailable;
    r.evidence = fmt::format("could not run: {}: {}", to_name(e.code), e.message);
    r.details["error"] = e.to_json();
    r.error = std::move(e);
    r.seconds = seconds_since(t0);
    return r;
  };

  bool door = is_door_probe(b);
  if (door && !t.door_policy) {
    // The planner refused the door policy for this tier: its named refusal is the verdict.
    const Error& e = *t.door_refusal;
    r.verdict = Verdict::Refused;
    r.evidence = fmt::format("REFUSED: the door policy is refused here: {}: {}", to_name(e.code), e.message);
    r.details["refusal"] = e.to_json();
    r.details["probe_started"] = false;
    r.error = e;
    r.seconds = seconds_since(t0);
    return r;
  }

  auto ws = t.canaries.make_workspace(name);
  if (!ws) return not_run(ws.error());
  // Output goes to files the suite owns: a probe's daemon may hold them open, which would keep a
  // pipe from ever reaching EOF.
  std::string base = bait.root + "/" + name;
  UniqueFd out(::open((base + ".out").c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  UniqueFd err(::open((base + ".err").c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!out || !err || !null)
    return not_run(fail_errno(Code::IoError, "cannot open " + base + ".out", errno).error());

  // The scenario's own bait, and the probe's arguments.
  auto open_session = [&t](const std::string& workspace) {
    return broker::Session::open(t.policy, t.facts,
                                 broker::SessionOptions{t.opts.state_dir, t.opts.profile, workspace});
  };
  Run run{name, bait, t.canaries, *ws, base, null.get(), r.details, open_session};
  std::unique_ptr<Scenario> scenario = row(b).make();
  auto args = scenario->bait(run);
  if (!args) return not_run(args.error());

  broker::SessionOptions so{t.opts.state_dir, t.opts.profile, *ws};
  // As `airlock serve` runs them: the probe's sandbox is built ahead, while the session waits
  // (the cold build is what `airlock run` uses, which the confined-run tests cover).
  so.keep_warm = true;
  if (door) {
    so.resolver = t.canaries.resolver();
    forget_door_traffic(t.canaries);
  }
  auto session = broker::Session::open(door ? *t.door_policy : t.policy, t.facts, so);
  if (!session) return not_run(session.error());
  broker::Session& s = **session;
  r.details["session"] = s.id();
  r.details["receipts"] = s.receipts_path();

  exec::Command cmd;
  // Relative to the command's working directory (the view, wherever the executor mounts it).
  cmd.argv = {"./.probe/" + std::string(kProbeProgram), name, "--run", bait.root};
  for (auto& a : *args) cmd.argv.push_back(std::move(a));
  cmd.stdin_fd = run.stdin_fd >= 0 ? run.stdin_fd : null.get();
  cmd.stdout_fd = out.get();
  cmd.stderr_fd = err.get();
  r.details["argv"] = cmd.argv;

  Observed o;
  o.wall_limit_ms = s.plan().limits.wall_timeout_ms + s.plan().limits.kill_grace_ms;
  std::shared_ptr<void> watching = scenario->watch(run);
  t.track(&s);
  auto outcome = s.run_command(cmd);
  t.track(nullptr);
  watching.reset();
  if (outcome)
    o.outcome = *outcome;
  else
    o.run_error = outcome.error();
  // Write back whatever the run left, success or not: the suite attacks write-back too.
  auto wb = s.close(true);
  if (wb)
    o.write_back = *wb;
  else
    o.close_error = wb.error();
  session->reset();

  o.output = read_back(out.get());
  o.errors = read_back(err.get());
  o.probe = parse_probe_report(o.output, name);
  scenario->observe(run, o);
  // Nothing may outlive a scenario: whatever of the probe still runs is noted, then killed.
  o.left_behind = t.canaries.kill_leftovers();
  conclude(r, o, scenario->judge(run, o), name);
  r.seconds = seconds_since(t0);
  return r;
}

std::string cell(const TierResult& t, Breach b) {
  if (t.status != TierStatus::Ran) return "unavailable";
  for (const auto& r : t.results)
    if (r.breach == b)
      return r.breached()                    ? "BREACHED"
             : r.verdict == Verdict::Refused ? "REFUSED"
                                             : std::string(to_string(r.verdict));
  return "not run";
}

}  // namespace

std::span<const Breach> all_breaches() { return kBreaches; }

std::string_view to_string(Breach b) { return row(b).name; }

bool is_door_probe(Breach b) { return row(b).policy == Policy::Door; }

size_t door_probe_count() {
  return static_cast<size_t>(std::count_if(std::begin(kBreaches), std::end(kBreaches), is_door_probe));
}

std::optional<Breach> breach_from_string(std::string_view name) {
  for (const Row& r : kRows)
    if (r.name == name) return r.breach;
  return std::nullopt;
}

Json ProbeReport::to_json() const {
  Json j = extra.is_object() ? extra : Json::object();
  j["probe"] = probe;
  j["breached"] = breached;
  j["evidence"] = evidence;
  j["errno"] = err;
  return j;
}

std::optional<ProbeReport> parse_probe_report(std::string_view output, std::string_view name) {
  size_t end = output.size();
  while (end > 0) {
    size_t start = output.rfind('\n', end - 1);
    start = start == std::string_view::npos ? 0 : start + 1;
    std::string_view line = output.substr(start, end - start);
    end = start == 0 ? 0 : start - 1;
    if (line.empty() || line.front() != '{') continue;
    // A probe's output is the sandbox's: bounded like any untrusted JSON.
    auto parsed = parse_json(line, Code::ProtocolError, "a probe report");
    if (!parsed) continue;
    Json j = std::move(*parsed);
    if (!j.is_object() || !j.contains("probe") || j["probe"] != name || !j.contains("breached") ||
        !j["breached"].is_boolean())
      continue;
    ProbeReport r;
    r.probe = std::string(name);
    r.breached = j["breached"].get<bool>();
    r.evidence = j.contains("evidence") && j["evidence"].is_string() ? j["evidence"].get<std::string>() : "";
    r.err = j.contains("errno") && j["errno"].is_number_integer() ? j["errno"].get<int>() : 0;
    for (const char* k : {"probe", "breached", "evidence", "errno"}) j.erase(k);
    r.extra = std::move(j);
    return r;
  }
  return std::nullopt;
}

Verdict TierResult::expected(Breach b) const {
  if (expect_breach) return Verdict::Breached;
  if (is_door_probe(b) && !plan::can_have_door(executor)) return Verdict::Refused;
  return Verdict::Contained;
}

size_t TierResult::matching() const {
  return static_cast<size_t>(std::count_if(results.begin(), results.end(), [&](const ScenarioResult& r) {
    // A refusal is only ever the planner's for the door policy, which differs from the suite's own
    // policy (planned for this tier, or the tier would not run) in code_network alone.
    return r.verdict == expected(r.breach);
  }));
}

bool TierResult::matched() const {
  return status == TierStatus::Ran && !cancelled && results.size() == all_breaches().size() &&
         matching() == results.size();
}

std::string TierResult::verdict() const {
  std::string name(policy::to_string(executor));
  if (status == TierStatus::Skipped)
    return fmt::format("{}: skipped — {}", name,
                       refusal ? refusal->message : std::string("not part of this build"));
  if (status == TierStatus::Unavailable)
    return fmt::format("{}: unavailable — {}: {}", name, refusal ? to_name(refusal->code) : "?",
                       refusal ? refusal->message : std::string());
  size_t total = all_breaches().size();
  bool doorless = !expect_breach && !plan::can_have_door(executor);
  size_t door_total = doorless ? door_probe_count() : 0;
  std::vector<std::string> wrong, errors, unsure, refused_wrongly;
  size_t refused = 0;
  const Error* door_refusal = nullptr;
  for (const auto& r : results) {
    if (r.verdict == Verdict::Unavailable) {
      errors.push_back(fmt::format("{} ({})", to_string(r.breach), r.error ? to_name(r.error->code) : "?"));
    } else if (r.verdict == Verdict::Inconclusive) {
      unsure.push_back(std::string(to_string(r.breach)));
    } else if (r.verdict == Verdict::Refused) {
      if (r.verdict == expected(r.breach) && r.error) {
        ++refused;
        door_refusal = &*r.error;
      } else {
        refused_wrongly.push_back(std::string(to_string(r.breach)));
      }
    } else if (r.verdict != expected(r.breach)) {
      wrong.push_back(std::string(to_string(r.breach)));
    }
  }
  std::string line;
  if (expect_breach) {
    line = fmt::format("{}: {}/{} breached", name, matching(), total);
    if (matched()) line += " — every probe detects its breach";
    if (!wrong.empty())
      line += fmt::format(
          " — NOT DETECTED: {} (with nothing confining it each probe must breach: the probe or its "
          "host check is broken)",
          fmt::join(wrong, ", "));
  } else {
    line = fmt::format("{}: {}/{} contained", name, matching() - refused, total - door_total);
    if (doorless)
      line += fmt::format("; door probes {}/{} refused{}", refused, door_total,
                          door_refusal
                              ? fmt::format(" — {}: {}", to_name(door_refusal->code), door_refusal->message)
                              : std::string());
    if (!wrong.empty()) line += fmt::format(" — BREACHED or NOT REFUSED: {}", fmt::join(wrong, ", "));
  }
  if (!refused_wrongly.empty())
    line += fmt::format(" — REFUSED where a door must run: {}", fmt::join(refused_wrongly, ", "));
  if (!errors.empty()) line += fmt::format(" — could not run: {}", fmt::join(errors, ", "));
  if (!unsure.empty())
    line += fmt::format(" — INCONCLUSIVE (the probe never started): {}", fmt::join(unsure, ", "));
  if (cancelled) line += fmt::format(" — cancelled after {} of {}", results.size(), total);
  return line;
}

bool SuiteReport::ok() const {
  if (cancelled) return false;
  bool ran = false;
  for (const auto& t : tiers) {
    if (t.status == TierStatus::Ran) {
      if (!t.matched()) return false;
      ran = true;
    } else if (t.requested) {
      return false;
    }
  }
  return ran;
}

Json SuiteReport::to_json() const {
  auto limits = [](const SuiteLimits& l) {
    return Json{{"memory_mb", l.memory_mb},
                {"cpu_seconds", l.cpu_seconds},
                {"max_processes", l.max_processes},
                {"command_timeout_seconds", l.command_timeout_seconds}};
  };
  Json names = Json::array(), door_names = Json::array();
  for (Breach b : all_breaches()) {
    names.push_back(to_string(b));
    if (is_door_probe(b)) door_names.push_back(to_string(b));
  }
  Json executors = Json::array();
  for (const auto& t : tiers) {
    std::string expected = t.expect_breach ? "breached" : "contained";
    Json results = Json::array();
    for (const auto& r : t.results) {
      Json j = r.details;
      j["breach"] = to_string(r.breach);
      j["verdict"] = to_string(r.verdict);
      j["expected"] = to_string(t.expected(r.breach));
      j["door"] = is_door_probe(r.breach);
      j["matched"] = r.verdict == t.expected(r.breach);
      j["evidence"] = r.evidence;
      j["seconds"] = r.seconds;
      results.push_back(std::move(j));
    }
    executors.push_back({{"executor", policy::to_string(t.executor)},
                         {"status", to_string(t.status)},
                         {"expected", expected},
                         {"requested", t.requested},
                         {"matched", t.matched()},
                         {"verdict", t.verdict()},
                         {"refusal", t.refusal ? t.refusal->to_json() : Json(nullptr)},
                         {"cancelled", t.cancelled},
                         {"canary_root", t.canary_root},
                         {"seconds", t.seconds},
                         {"results", results}});
  }
  return {{"schema", "airlock.escape_suite.v1"},
          {"profile", plan::to_string(profile)},
          {"uid", uid},
          {"kernel", kernel},
          {"ok", ok()},
          {"cancelled", cancelled},
          {"breaches", names},
          {"door_breaches", door_names},
          {"limits", {{"tier", limits(kTierLimits)}, {"host_baseline", limits(kHostBaselineLimits)}}},
          {"probe_amounts",
           {{"memory_mib", kProbeMemoryMib},
            {"cpu_seconds", kProbeCpuSeconds},
            {"sleep_seconds", kProbeSleepSeconds}}},
          {"executors", executors}};
}

std::string SuiteReport::to_text() const {
  std::string s = fmt::format("airlock escape-suite: profile {}, uid {}, kernel {}\n",
                              plan::to_string(profile), uid, kernel);
  std::vector<const TierResult*> columns;
  for (const auto& t : tiers)
    if (t.status != TierStatus::Skipped) columns.push_back(&t);
  if (!columns.empty()) {
    auto row = [&](std::string_view first, auto&& cell_of) {
      std::string line = fmt::format("  {:<30}", first);
      for (const auto* t : columns) line += fmt::format("{:<13}", cell_of(*t));
      while (line.back() == ' ') line.pop_back();
      s += line + "\n";
    };
    s += "\n";
    row("BREACH", [](const TierResult& t) { return std::string(policy::to_string(t.executor)); });
    for (Breach b : all_breaches()) row(to_string(b), [b](const TierResult& t) { return cell(t, b); });
    s += "\nevidence:\n";
    for (const auto* t : columns) {
      if (t->status != TierStatus::Ran) continue;
      for (const auto& r : t->results)
        s += fmt::format("  {}/{}: {}: {}\n", policy::to_string(t->executor), to_string(r.breach),
                         r.breached() ? "BREACHED" : to_string(r.verdict), r.evidence);
    }
  }
  s += "\n";
  for (const auto& t : tiers)
    s += t.status == TierStatus::Ran ? fmt::format("{} ({:.1f} s)\n", t.verdict(), t.seconds)
                                     : t.verdict() + "\n";
  return s;
}

void Suite::cancel() {
  cancelled_ = true;
  std::lock_guard lock(mu_);
  if (current_) current_->interrupt();
}

Result<TierResult> Suite::run_tier(ExecutorKind executor, bool requested, const plan::HostFacts& facts) {
  auto t0 = std::chrono::steady_clock::now();
  TierResult t;
  t.executor = executor;
  t.expect_breach = executor == ExecutorKind::Host;
  t.requested = requested;
  auto pol = TRY(suite_policy(executor, container_image_));
  if (auto planned = exec::plan_session(pol, facts, {opts_.profile, "", 0}); !planned) {
    t.refusal = planned.error();
    t.status =
        !requested && only_not_in_build(planned.error()) ? TierStatus::Skipped : TierStatus::Unavailable;
    return t;
  }
  auto canaries = TRY(Canaries::plant(probe_binary_));
  canaries->set_foreign_children(foreign_children_);
  t.canary_root = canaries->bait().root;
  // The door probes' policy names the allowed server's port, known once the bait is planted. A
  // tier that cannot have a door refuses it by name: that refusal is its door probes' verdict. The
  // two policies differ in code_network alone, so a refusal here is the door's.
  auto door_pol = TRY(suite_policy(executor, container_image_, &canaries->bait().door));
  std::optional<Error> door_refusal;
  if (auto planned = exec::plan_session(door_pol, facts, {opts_.profile, "", 0}); !planned)
    door_refusal = planned.error();
  TierContext ctx{pol,
                  door_refusal ? nullptr : &door_pol,
                  door_refusal,
                  facts,
                  opts_,
                  *canaries,
                  [this](broker::Session* s) {
                    std::lock_guard lock(mu_);
                    current_ = s;
                    if (s && cancelled_) s->interrupt();
                  }};
  for (Breach b : all_breaches()) {
    if (cancelled_) break;
    t.results.push_back(run_one(b, ctx));
    if (opts_.on_result) opts_.on_result(t, t.results.back());
  }
  t.cancelled = cancelled_;
  canaries.reset();  // the sleeper, the listeners, the environment variable, the directory
  t.seconds = seconds_since(t0);
  return t;
}

Result<SuiteReport> Suite::run() {
  SuiteReport rep;
  rep.profile = opts_.profile;
  rep.uid = ::geteuid();
  probe_binary_ = opts_.probe_binary.empty() ? probe_beside_self() : opts_.probe_binary;
  std::vector<ExecutorKind> order;
  if (opts_.executor) {
    order = {*opts_.executor};
  } else {
    // Every tier this build implements (exec's registry), the host only in the development profile.
    for (auto e : exec::built_tiers())
      if (e != ExecutorKind::Host || opts_.profile == plan::Profile::Development) order.push_back(e);
  }
  plan::FactNeeds needs;
  for (auto e : order) {
    // The container tier's image, made here once per state directory (the probe checks it).
    if (e == ExecutorKind::Container) container_image_ = ensure_container_image(opts_.state_dir);
    auto pol = TRY(suite_policy(e, container_image_));
    auto n = plan::fact_needs(pol, exec::built_tiers());
    needs.user_namespaces |= n.user_namespaces;
    needs.overlayfs |= n.overlayfs;
    needs.cgroups |= n.cgroups;
    needs.kvm |= n.kvm;
    needs.container |= n.container;
  }
  // `airlock vm verify` hands over the guest it is verifying: only the rest is measured.
  bool pinned_vm = needs.kvm && opts_.microvm;
  if (pinned_vm) needs.kvm = false;
  plan::HostFacts facts = exec::HostProbe(opts_.state_dir, exec::HostProbe::Measure::Fresh).facts(needs);
  if (pinned_vm) facts.microvm = *opts_.microvm;
  rep.kernel = facts.kernel_release;

  // A child subreaper for the run: what a probe leaves behind after its supervisor is gone comes
  // to us rather than to init, so it can be found, killed and reaped.
  int was_subreaper = 0;
  (void)::prctl(PR_GET_CHILD_SUBREAPER, &was_subreaper);
  if (!was_subreaper && ::prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
    return fail_errno(Code::IoError, "prctl(PR_SET_CHILD_SUBREAPER)", errno);
  foreign_children_ = children_of_self();
  Result<SuiteReport> result = rep;
  for (auto e : order) {
    if (cancelled_) break;
    auto t = run_tier(e, opts_.executor.has_value(), facts);
    if (!t) {
      result = std::unexpected(t.error());
      break;
    }
    result->tiers.push_back(std::move(*t));
  }
  if (!was_subreaper) (void)::prctl(PR_SET_CHILD_SUBREAPER, 0);
  if (result) result->cancelled = cancelled_;
  return result;
}

}  // namespace airlock::escape
