// The effect ledger: every tool dispatch as JSON lines, two-phase (intent durable before the
// effect, outcome after), a writer that repairs a crashed predecessor's torn tail, and a scanner.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/effect_record.h"
#include "base/error.h"
#include "base/json_util.h"
#include "base/unique_fd.h"

namespace airlock::ledger {

using airlock::EffectIntent;
using airlock::EffectOutcome;
using airlock::DispatchRecorder;

// Bytes a repair cut from the tail and kept as a {"phase":"torn"} line.
struct TornArtifact {
  uint64_t line = 0;    // the torn record's own line (1-based)
  uint64_t offset = 0;  // where the fragment began
  uint64_t length = 0;
  std::string sha256;
  std::string bytes_b64;
  int64_t repaired_at = 0;
};

// One completed dispatch: an intent and its own outcome, or a single record.
struct LedgerRow {
  EffectIntent intent;
  EffectOutcome outcome;
  bool single = false;
  uint64_t line = 0;  // the intent's (or single record's) line
  uint64_t outcome_line = 0;
};

// An intent whose own attempt has no outcome: the effect may or may not have happened.
struct OrphanIntent {
  EffectIntent intent;
  uint64_t line = 0;
  uint64_t offset = 0;
};

// A line the scanner cannot decode, parse or validate.
struct CorruptLine {
  uint64_t line = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::string sha256;
  std::string reason;
};

// Bytes after the last newline: a writer may be in the middle of a line, so they are reported,
// not judged. `complete_record` says whether they already form a valid record.
struct LiveTail {
  uint64_t offset = 0;
  uint64_t length = 0;
  std::string sha256;
  bool complete_record = false;
};

struct LedgerScan {
  std::vector<LedgerRow> rows;
  std::vector<OrphanIntent> orphans;
  std::vector<TornArtifact> torn;
  std::optional<LiveTail> tail;
  std::vector<CorruptLine> corrupt;  // tolerant mode only: strict mode fails instead
  uint64_t lines = 0, bytes = 0;
  Json to_json() const;
};

// Reads and checks every line. Strict mode fails with AIRLOCK_LEDGER_CORRUPT on any line it
// cannot decode (strict UTF-8, then JSON), that is not an object, lacks or mistypes a field, has
// an unknown phase or key, or breaks the attempt structure (a second intent for an attempt, an
// outcome without its intent); facts.problems carry each line number, byte offset, length and
// the sha256 of its bytes. Tolerant mode returns those as `corrupt` instead.
Result<LedgerScan> scan_ledger(const std::string& path, bool tolerant = false);
Result<LedgerScan> scan_ledger_bytes(std::string_view bytes, bool tolerant = false);

struct LedgerOptions {
  // Two-phase records. false: the single-record form, one line after each dispatch, for a
  // ledger that cannot take intents.
  bool intents = true;
  // fdatasync after each intent and single record: survives power loss, not just a crash.
  bool fsync = false;
};

// What open() found and did before its first append.
struct RepairReport {
  bool terminated = false;                  // a complete last record lacked only its newline
  std::optional<TornArtifact> quarantined;  // an unparseable fragment, cut and kept
  bool stole_stale_lock = false;
};

// How long a repair lock may sit before another writer takes it over.
inline constexpr int64_t kRepairLockStaleMs = 10'000;

// The one writer of a ledger path. Not thread-safe; one writer per path (a second process may
// open the path after a crash: the repair is exclusive between processes).
class EffectLedger final : public DispatchRecorder {
 public:
  // Opens (creating, mode 0600) and repairs the tail under <path>.repair-lock. Errors are
  // AIRLOCK_LEDGER_WRITE_FAILED.
  static Result<EffectLedger> open(const std::string& path, LedgerOptions options = {});

  // Appends one record with one write(2) (and fdatasync with options.fsync); when it returns
  // the record is in the file. A failure is AIRLOCK_LEDGER_WRITE_FAILED and ends this writer:
  // a partial line may be on disk, which only the next open() may repair.
  Result<void> append_intent(const EffectIntent& intent);
  Result<void> append_outcome(const EffectOutcome& outcome);
  Result<void> append_single(const EffectIntent& intent, const EffectOutcome& outcome);

  // As a DispatchRecorder: two phases, or (without intents) one single record in outcome().
  Result<void> intent(const EffectIntent& intent) override;
  Result<void> outcome(const EffectIntent& intent, const EffectOutcome& outcome) override;

  bool intents() const { return options_.intents; }
  const RepairReport& repair() const { return repair_; }
  const std::string& path() const { return path_; }

 private:
  EffectLedger(std::string path, LedgerOptions options, UniqueFd fd)
      : path_(std::move(path)), options_(options), fd_(std::move(fd)) {}
  Result<void> append_line(const Json& record, bool sync);
  std::string path_;
  LedgerOptions options_;
  UniqueFd fd_;
  RepairReport repair_;
  bool broken_ = false;
};

// The records as written (exposed for tests and the benchmark).
Json intent_record(const EffectIntent& i);
Json outcome_record(const EffectOutcome& o);
Json single_record(const EffectIntent& i, const EffectOutcome& o);


}  // namespace airlock::ledger
