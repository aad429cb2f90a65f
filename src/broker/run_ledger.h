// A run's keying and effect ledger as a session holds them: the json-protocol tools a session
// dispatches (pipe, HTTP, MCP) are keyed and recorded exactly as `airlock tool call` keys and
// records them, under STATE/ledgers/:
//   RUN.run.json  the run's keying (run id, generation, derivation version): made at a fresh
//                 start, read back, never re-minted, when a later session resumes the run;
//   RUN.jsonl     the effect ledger: an intent before each dispatch, its outcome after;
//   RUN.lock      held (flock) by the one session that has the run open.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.h"
#include "base/unique_fd.h"
#include "ledger/effect_ledger.h"
#include "ledger/idempotency.h"

namespace airlock::broker {

// A run id names files: 1 to 64 of [A-Za-z0-9_.-], not starting with '.'. Anything else is
// AIRLOCK_OPTION_INVALID.
Result<void> check_run_id(std::string_view id);

struct RunPaths {
  std::string keying, ledger, lock;
};
RunPaths run_paths(const std::string& state_dir, const std::string& run_id);

class RunLedger {
 public:
  // Takes the run's lock (AIRLOCK_RUN_IN_USE while another session holds it), reads the run's
  // keying or starts the run, opens (and repairs) its ledger, and reads it to number the next
  // call: one step past the last completed call, so the call a crash left as an orphaned intent
  // is the step a resumed session retries, under the same key when its tool and arguments are
  // the same. A ledger or keying file that cannot be read as written is AIRLOCK_LEDGER_CORRUPT.
  static Result<RunLedger> open(const std::string& state_dir, const std::string& run_id);

  const ledger::RunKeying& keying() const { return keying_; }
  ledger::EffectLedger& ledger() { return ledger_; }
  const RunPaths& paths() const { return paths_; }
  // Whether the run existed before this session (its keying was read back, not minted).
  bool resumed() const { return resumed_; }
  // The step of the next call: the caller's own when it names one (later calls follow it), else
  // the next in turn.
  uint64_t take_step(std::optional<uint64_t> asked);

  // The span a call at `step` is recorded under ("step-N.0"), and the step a span names.
  static std::string span_of(uint64_t step);
  static std::optional<uint64_t> step_of(std::string_view span);

 private:
  RunLedger(RunPaths paths, UniqueFd lock, ledger::RunKeying keying, ledger::EffectLedger ledger)
      : paths_(std::move(paths)),
        lock_(std::move(lock)),
        keying_(std::move(keying)),
        ledger_(std::move(ledger)) {}
  RunPaths paths_;
  UniqueFd lock_;
  ledger::RunKeying keying_;
  ledger::EffectLedger ledger_;
  bool resumed_ = false;
  uint64_t next_step_ = 0;
};

}  // namespace airlock::broker
