// Idempotency keys: a pure function of the run, its generation, the logical invocation, the tool
// and the canonical arguments, under a derivation version stamped once per run.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/error.h"
#include "base/json_util.h"

namespace airlock::ledger {

// Version 1: without the generation token (so a run deleted and recreated under the same id
// repeats its keys). Version 2, current: with it.
inline constexpr int kKeyDerivationV1 = 1;
inline constexpr int kKeyDerivationCurrent = 2;

// What a run carries from its fresh start through every resume, unchanged.
struct RunKeying {
  std::string run_id;
  std::string generation;  // minted at a fresh start, never at a resume
  int derivation_version = kKeyDerivationCurrent;
  Json to_json() const;
  // Strict: every field present and typed; an unknown version is AIRLOCK_KEY_DERIVATION_UNKNOWN.
  static Result<RunKeying> from_json(const Json& j);
};

// A fresh start: a new generation token and the current derivation version.
RunKeying start_run(std::string run_id);

// Which call this is: the calling step's sequence number and the call's ordinal within it.
struct Invocation {
  uint64_t step = 0;
  uint32_t ordinal = 0;
};

// The key, e.g. "ik2-<64 hex>". A version this build does not know is
// AIRLOCK_KEY_DERIVATION_UNKNOWN: a key is never derived by another version's rule.
Result<std::string> derive_key(const RunKeying& run, Invocation call, std::string_view tool, const Json& args);

}  // namespace airlock::ledger
