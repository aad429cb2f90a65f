// RunLedger: a run's keying and effect ledger, held by one session at a time.
#include "broker/run_ledger.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <cerrno>
#include <charconv>

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

  // The keying: read back when the run exists, else minted once and kept.
  ledger::RunKeying keying;
  bool resumed = false;
  struct stat st {};
  if (::lstat(paths.keying.c_str(), &st) == 0) {
    auto text = TRY(read_file(paths.keying, Code::LedgerCorrupt));
    auto j = TRY(parse_json(text, Code::LedgerCorrupt, paths.keying));
    keying = TRY(ledger::RunKeying::from_json(j));
    if (keying.run_id != run_id)
      return fail(Code::LedgerCorrupt,
                  fmt::format("{} keys the run {}, not {}", paths.keying, keying.run_id, run_id),
                  {{"path", paths.keying}});
    resumed = true;
  } else if (errno == ENOENT) {
    keying = ledger::start_run(run_id);
    TRY(write_file_atomic(paths.keying, keying.to_json().dump() + "\n", 0600));
  } else {
    return fail_errno(Code::LedgerCorrupt, "stat " + paths.keying, errno);
  }

  auto led = TRY(ledger::EffectLedger::open(paths.ledger));
  auto scan = TRY(ledger::scan_ledger(paths.ledger));
  RunLedger r(std::move(paths), std::move(lock), std::move(keying), std::move(led));
  r.resumed_ = resumed;
  for (const auto& row : scan.rows)
    if (auto n = step_of(row.intent.span); n && *n + 1 > r.next_step_) r.next_step_ = *n + 1;
  return r;
}

uint64_t RunLedger::take_step(std::optional<uint64_t> asked) {
  uint64_t n = asked.value_or(next_step_);
  next_step_ = n + 1;
  return n;
}

}  // namespace airlock::broker
