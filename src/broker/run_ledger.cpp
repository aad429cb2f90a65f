// RunLedger: a run's keying and effect ledger, held by one session at a time.
#include "broker/run_ledger.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <vector>

#include "base/encoding.h"
#include "base/fs.h"
#include "base/json_util.h"

namespace airlock::broker {

Result<void> check_run_id(std::string_view id) {
  bool ok = !id.empty() && id.size() <= 64 && id.front() != '.' &&
            id.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") ==
                std::string_view::npos;
  if (!ok) {
    std::string shown = is_valid_utf8(id) ? std::string(id.substr(0, 80)) : "(not UTF-8)";
    return fail(
        Code::OptionInvalid,
        fmt::format(
            "\"{}\" cannot be a run id: 1 to 64 letters, digits, '_', '.' or '-', not starting with '.'",
            shown));
  }
  return {};
}

RunPaths run_paths(const std::string& state_dir, const std::string& run_id) {
  std::string base = state_dir + "/ledgers/" + run_id;
  return {base + ".run.json", base + ".jsonl", base + ".lock"};
}

std::string RunLedger::span_of(uint64_t step) { return fmt::format("step-{}.0", step); }

std::optional<uint64_t> RunLedger::step_of(std::string_view span) {
  if (!span.starts_with("step-")) return std::nullopt;
  span.remove_prefix(5);
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(span.data(), span.data() + span.size(), n);
  if (ec != std::errc() || end == span.data() || end == span.data() + span.size() || *end != '.')
    return std::nullopt;
  return n;
}

namespace {

// A path of the run's that must be a regular file when it exists (never a link to elsewhere).
Result<bool> regular_file(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return false;
    return fail_errno(Code::LedgerCorrupt, "lstat " + path, errno);
  }
  if (!S_ISREG(st.st_mode))
    return fail(Code::LedgerCorrupt, fmt::format("{} is not a regular file", path), {{"path", path}});
  return true;
}

}  // namespace

Result<RunLedger> RunLedger::open(const std::string& state_dir, const std::string& run_id) {
  TRY(check_run_id(run_id));
  RunPaths paths = run_paths(state_dir, run_id);
  TRY(make_dirs(state_dir + "/ledgers", 0700));
  UniqueFd lock(::open(paths.lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!lock) return fail_errno(Code::LedgerWriteFailed, "open " + paths.lock, errno);
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return fail(
          Code::RunInUse,
          fmt::format("the run {} is open in another session: one session at a time writes a run's ledger",
                      run_id),
          {{"run_id", run_id}, {"lock", paths.lock}});
    return fail_errno(Code::LedgerWriteFailed, "flock " + paths.lock, errno);
  }

  // The ledger first, then the keying: a run is its keying with its ledger, and a crash between
  // the two leaves an empty ledger, which a fresh start may take.
  bool had_keying = TRY(regular_file(paths.keying));
  bool had_ledger = TRY(regular_file(paths.ledger));
  if (had_keying && !had_ledger)
    return fail(
        Code::LedgerCorrupt,
        fmt::format("the run {} has its keying ({}) but not its ledger: numbering from its start would "
                    "repeat keys already handed out",
                    run_id, paths.keying),
        {{"keying", paths.keying}, {"ledger", paths.ledger}});
  auto led = TRY(ledger::EffectLedger::open(paths.ledger));
  auto scan = TRY(ledger::scan_ledger(paths.ledger));
  if (!had_keying && (!scan.rows.empty() || !scan.orphans.empty()))
    return fail(
        Code::LedgerCorrupt,
        fmt::format("the run {} has a ledger ({}) but lost its keying: a new one would give its calls "
                    "other keys",
                    run_id, paths.ledger),
        {{"keying", paths.keying}, {"ledger", paths.ledger}});

  ledger::RunKeying keying;
  if (had_keying) {
    auto text = TRY(read_file(paths.keying, Code::LedgerCorrupt));
    auto j = TRY(parse_json(text, Code::LedgerCorrupt, paths.keying));
    keying = TRY(ledger::RunKeying::from_json(j));
    if (keying.run_id != run_id)
      return fail(Code::LedgerCorrupt,
                  fmt::format("{} keys the run {}, not {}", paths.keying, keying.run_id, run_id),
                  {{"path", paths.keying}});
  } else {
    keying = ledger::start_run(run_id);
    TRY(write_file_atomic(paths.keying, keying.to_json().dump() + "\n", 0600));
  }

  // Each step's last attempt, in the order written: settled or not.
  struct Attempt {
    uint64_t line;
    const ledger::EffectIntent* intent;
    bool settled;
  };
  std::vector<Attempt> attempts;
  for (const auto& row : scan.rows)
    attempts.push_back({row.line, &row.intent,
                        row.outcome.ok || settles(row.outcome.error ? std::optional<Code>(row.outcome.error->code)
                                                                    : std::nullopt)});
  for (const auto& o : scan.orphans) attempts.push_back({o.line, &o.intent, false});
  std::sort(attempts.begin(), attempts.end(), [](const auto& a, const auto& b) { return a.line < b.line; });
  RunLedger r(std::move(paths), std::move(lock), std::move(keying), std::move(led));
  r.resumed_ = had_keying;
  for (const auto& row : scan.rows)
    if (row.intent.run_id != run_id)
      return fail(Code::LedgerCorrupt,
                  fmt::format("{} line {} records the run {}, not {}", r.paths_.ledger, row.line,
                              row.intent.run_id, run_id),
                  {{"path", r.paths_.ledger}, {"line", row.line}});
  for (const auto& a : attempts) {
    auto n = step_of(a.intent->span);
    if (!n || *n > kMaxStep) continue;  // a span of another writer's (airlock tool call --span)
    r.settle(*n, a.settled, {a.intent->tool, a.intent->args_hash});
    r.next_step_ = std::max(r.next_step_, *n + 1);
  }
  return r;
}

Result<uint64_t> RunLedger::take_step(std::optional<uint64_t> asked, const Call& call) {
  if (asked && *asked > kMaxStep)
    return fail(Code::OptionInvalid, fmt::format("step {} is past the highest a call may name ({})", *asked, kMaxStep),
                {{"step", *asked}});
  uint64_t n = next_step_;
  if (asked) {
    n = *asked;
  } else {
    auto retry = std::find_if(unsettled_.begin(), unsettled_.end(), [&](const auto& u) { return u.second == call; });
    if (retry != unsettled_.end()) n = retry->first;
  }
  next_step_ = std::max(next_step_, n + 1);
  return n;
}

void RunLedger::settle(uint64_t step, bool settled, const Call& call) {
  if (settled)
    unsettled_.erase(step);
  else
    unsettled_[step] = call;
}

bool RunLedger::settles(const std::optional<Code>& error) {
  return !error || *error == Code::ToolFailed || *error == Code::ProtocolError;
}

}  // namespace airlock::broker
