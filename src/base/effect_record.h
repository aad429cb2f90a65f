// The two records of a tool dispatch as plain values, and the recorder interface: the executor
// fills them, the effect ledger writes them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/error.h"

namespace airlock {

// Phase one: what is about to be dispatched, with everything needed to reconcile it if no
// outcome ever follows.
struct EffectIntent {
  std::string attempt_id;  // minted per dispatch; the outcome carries the same one
  std::string key;         // idempotency key
  std::string tool;
  std::string args_hash;   // sha256 of the canonical arguments
  std::string run_id;
  std::string span;
  std::string workdir;     // host path of the call's working directory
  int64_t started_at = 0;  // ms since the epoch
  std::string approval_id = {};  // the approval that let this dispatch run; empty when none was needed
};

// Phase two: how it ended.
struct EffectOutcome {
  std::string attempt_id;
  std::string key;
  bool ok = false;
  std::optional<Error> error;  // set when !ok: code and message as the caller saw them
  int64_t finished_at = 0;     // ms since the epoch
  double wall_ms = 0;
};

// Where dispatches are recorded; the effect ledger is one. intent() must be durable when it
// returns: the effect is dispatched only after it. A recorder without the intent capability
// records nothing there and the whole dispatch in outcome().
class DispatchRecorder {
 public:
  virtual ~DispatchRecorder() = default;
  virtual Result<void> intent(const EffectIntent& intent) = 0;
  virtual Result<void> outcome(const EffectIntent& intent, const EffectOutcome& outcome) = 0;
};

}  // namespace airlock
