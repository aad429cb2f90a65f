// A run's keying and effect ledger as a session holds them: the json-protocol tools a session
// dispatches (pipe, HTTP, MCP) are keyed and recorded exactly as `airlock tool call` keys and
// records them, under STATE/ledgers/:
//   RUN.run.json  the run's keying (run id, generation, derivation version): made at a fresh
//                 start, read back, never re-minted, when a later session resumes the run;
//   RUN.jsonl     the effect ledger: an intent before each dispatch, its outcome after;
//   RUN.lock      held (flock) by the one session that has the run open.
#pragma once

#include <cstdint>
#include <map>
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

// The highest step a call may name: JSON's exact integers (a step numbers calls, it never wraps).
inline constexpr uint64_t kMaxStep = (uint64_t{1} << 53) - 1;

class RunLedger {
 public:
  // Takes the run's lock (AIRLOCK_RUN_IN_USE while another session holds it), reads the run's
  // keying or starts the run, opens (and repairs) its ledger, and reads it to number the next
  // call (take_step). The keying and the ledger go together: one without the other, either of
  // them not a regular file, or a ledger row of another run, is AIRLOCK_LEDGER_CORRUPT (keys
  // would repeat, or a retry would get another key).
  static Result<RunLedger> open(const std::string& state_dir, const std::string& run_id);

  const ledger::RunKeying& keying() const { return keying_; }
  ledger::EffectLedger& ledger() { return ledger_; }
  const RunPaths& paths() const { return paths_; }
  // Whether the run existed before this session (its keying was read back, not minted).
  bool resumed() const { return resumed_; }
  // The call a step holds: its tool and the sha256 of its canonical arguments.
  struct Call {
    std::string tool, args_sha256;
    bool operator==(const Call&) const = default;
  };
  // The step of the next call: the caller's own when it names one (at most kMaxStep, else
  // AIRLOCK_OPTION_INVALID); else the lowest step whose last attempt of this very call did not
  // settle (its intent orphaned by a crash, or the call stopped before it could end: killed,
  // timed out, cut off), so its retry carries its key; else one past the highest step so far.
  // Another call never takes an unsettled step: it stays for its own retry.
  Result<uint64_t> take_step(std::optional<uint64_t> asked, const Call& call);
  // How the call at `step` ended: settled (a result, or the program's own failure) or not.
  void settle(uint64_t step, bool settled, const Call& call);
  // Whether an outcome with this error (none: ok) settles its step: the program ran to its own
  // end (AIRLOCK_TOOL_FAILED, AIRLOCK_PROTOCOL_ERROR). Anything else may have stopped it midway.
  static bool settles(const std::optional<Code>& error);

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
  std::map<uint64_t, Call> unsettled_;
};

}  // namespace airlock::broker
