// Receipts: one hash-chained JSON line per decision (airlock.action_receipt.v1).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json_util.h"
#include "base/unique_fd.h"

namespace airlock::ledger {

inline constexpr std::string_view kReceiptSchema = "airlock.action_receipt.v1";
// The body key that lists strings written lossy, with their exact bytes (json_util.h repair_utf8).
inline constexpr std::string_view kNotUtf8Key = "not_utf8";
// A receipt line is read with these bounds: the depth a record may have (above a parsed
// value's), and room for a request as large as parse_json reads (kMaxJsonBytes) several times
// over, since a refusal may quote it in its message and facts beside the arguments. A sandbox
// must not be able to write a receipt its own chain cannot read back.
inline constexpr JsonLimits kReceiptLineLimits{8 * kMaxJsonBytes, kMaxRecordDepth, false};
// The `prev` of the first receipt.
inline constexpr std::string_view kGenesis =
    "0000000000000000000000000000000000000000000000000000000000000000";

class ReceiptLog {
 public:
  // Creates a new log (never appends to an existing file), mode 0600, and holds its lock
  // (flock) while the log is open, so repair_torn_tail never races a live session.
  static Result<ReceiptLog> create(const std::string& path, std::string session_id);

  // Appends {schema, session, seq, ts, kind, prev, ...body} as one canonical line with one
  // write(2); returns the receipt as written. A failed write is AIRLOCK_LEDGER_WRITE_FAILED.
  // Never refuses for the body's bytes: strings that are not UTF-8 are written lossy and listed
  // exactly under kNotUtf8Key.
  Result<Json> append(std::string_view kind, Json body);

  // Adds `key: value` to every receipt appended from now on (a body's own key wins). A session
  // stamps the executor, tier and reason that confine it, so every receipt names them.
  void stamp(const std::string& key, Json value) { stamps_[key] = std::move(value); }

  const std::string& path() const { return path_; }
  uint64_t count() const { return seq_; }
  // Bytes this log has appended (its file's size: a log is never appended to by another).
  uint64_t bytes() const { return bytes_; }

 private:
  ReceiptLog(std::string path, std::string session, UniqueFd fd)
      : path_(std::move(path)), session_(std::move(session)), fd_(std::move(fd)) {}
  std::string path_;
  std::string session_;
  UniqueFd fd_;
  uint64_t seq_ = 0;
  uint64_t bytes_ = 0;
  bool broken_ = false;  // a failed write may have left a torn line: no more appends
  std::string prev_ = std::string(kGenesis);
  Json stamps_ = Json::object();
};

struct ChainCheck {
  uint64_t receipts = 0;
  std::string last_hash;
};

// Checks every line's `prev` against the sha256 of the line before and the seq order.
// A break is AIRLOCK_LEDGER_CORRUPT with facts.line (1-based) and what was expected. Bytes after
// the last newline (a write cut short: a full disk, power lost) are a torn tail: also
// AIRLOCK_LEDGER_CORRUPT, with facts.torn_tail {offset, length} and facts.receipts (those before
// it, which verify), and the message names repair_torn_tail's command.
Result<ChainCheck> verify_chain(const std::string& path);

// A place in a receipts log that verifies up to there: where the next line starts, how many
// receipts are before it, and the last one's hash (kGenesis at the start).
struct ChainCursor {
  uint64_t offset = 0;
  uint64_t receipts = 0;
  std::string last_hash = std::string(kGenesis);
};

struct ChainPage {
  std::vector<Json> receipts;     // each whole line after the cursor that chains on, in order
  std::vector<uint64_t> offsets;  // where each starts in the file
  std::vector<std::string> sha256;  // each line's hash (the next line's prev)
  ChainCursor next;               // after the last of them
  std::optional<Error> broken;    // the line that does not chain on (AIRLOCK_LEDGER_CORRUPT): the page ends before it
  bool more = false;              // whole lines are left past max_bytes
};

// Reads a log on from `from` (a live one too: a line still being written is left for the next
// read), about max_bytes at a time but at least one whole line, verifying each line as
// verify_chain does. Reading on from each page's `next` verifies a growing log once, in pieces.
Result<ChainPage> read_chain(const std::string& path, const ChainCursor& from, uint64_t max_bytes);

// The whole lines of a log between offsets `offset` and `end` (a part read_chain has verified),
// parsed, with their offsets and hashes but their links not checked: about max_bytes of them,
// at least one. A line that is not JSON ends the page (`broken`). A caller compares the hashes
// with those read_chain gave, to see a line changed since.
Result<ChainPage> read_lines(const std::string& path, uint64_t offset, uint64_t end, uint64_t max_bytes);

struct TailRepair {
  uint64_t receipts = 0;     // in the log after the repair
  bool terminated = false;   // the tail was a whole receipt that chains, short of its newline
  bool quarantined = false;  // the tail became a `receipts.torn_tail` receipt (its bytes in base64)
  uint64_t offset = 0, length = 0;
};

// The ledger's torn-tail rule for a receipts log whose session is over (a live session holds
// its log's lock: refused, AIRLOCK_LEDGER_WRITE_FAILED). Every complete line must verify (else
// AIRLOCK_LEDGER_CORRUPT, nothing written). A tail that is a whole receipt chaining on is
// terminated with its newline; any other tail is replaced by a receipt of kind
// `receipts.torn_tail` chaining on, with the tail's offset, length, sha256 and bytes (base64) —
// the repaired log written beside and renamed over the torn one, so nothing is lost at any
// moment — and the chain verifies again. A log without a torn tail is left as it is.
Result<TailRepair> repair_torn_tail(const std::string& path);

// Current UTC time as RFC 3339 with microseconds.
std::string now_rfc3339();

}  // namespace airlock::ledger
