// The effect ledger: record shapes, the strict decoder the scanner and the repair share, the
// writer with its exclusive tail repair, and the scanner.
#include "ledger/effect_ledger.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "base/encoding.h"
#include "base/fs.h"
#include "base/hash.h"

namespace airlock::ledger {

namespace {

// The key beside a record's fields that lists strings written lossy, with their exact bytes.
constexpr const char* kNotUtf8Key = "not_utf8";

Json error_json(const std::optional<Error>& e) {
  if (!e) return nullptr;
  return {{"code", to_name(e->code)}, {"message", e->message}};
}

void put_intent(Json& j, const EffectIntent& i) {
  j["attempt_id"] = i.attempt_id;
  j["key"] = i.key;
  j["tool"] = i.tool;
  j["args_hash"] = i.args_hash;
  j["run_id"] = i.run_id;
  j["span"] = i.span;
  j["workdir"] = i.workdir;
  j["started_at"] = i.started_at;
  if (!i.approval_id.empty()) j["approval_id"] = i.approval_id;  // only a dispatch that needed one
}

void put_outcome(Json& j, const EffectOutcome& o) {
  j["attempt_id"] = o.attempt_id;
  j["key"] = o.key;
  j["status"] = o.ok ? "ok" : "error";
  j["error"] = error_json(o.error);
  j["finished_at"] = o.finished_at;
  j["wall_ms"] = o.wall_ms;
}

Json torn_record(const TornArtifact& t) {
  return {{"phase", "torn"},           {"offset", t.offset},       {"length", t.length},
          {"sha256", t.sha256},        {"bytes_b64", t.bytes_b64}, {"repaired_at", t.repaired_at}};
}

// ---- the strict decoder ----------------------------------------------------------------------

enum class Phase { Intent, Outcome, Single, Torn };

struct Decoded {
  Phase phase = Phase::Intent;
  EffectIntent intent;
  EffectOutcome outcome;
  TornArtifact torn;
};

// Reads one typed field or says why not.
class Fields {
 public:
  explicit Fields(const Json& j) : j_(j) {}
  const std::string& why() const { return why_; }
  bool ok() const { return why_.empty(); }
  std::string str(const char* k) {
    const Json* v = get(k);
    if (!v) return {};
    if (!v->is_string()) return mistyped(k, "a string"), std::string();
    return v->get<std::string>();
  }
  int64_t i64(const char* k) {
    const Json* v = get(k);
    if (!v) return 0;
    if (!v->is_number_integer()) return mistyped(k, "an integer"), 0;
    return v->get<int64_t>();
  }
  uint64_t u64(const char* k) {
    const Json* v = get(k);
    if (!v) return 0;
    if (!v->is_number_unsigned()) return mistyped(k, "a non-negative integer"), 0;
    return v->get<uint64_t>();
  }
  double num(const char* k) {
    const Json* v = get(k);
    if (!v) return 0;
    if (!v->is_number()) return mistyped(k, "a number"), 0;
    return v->get<double>();
  }
  const Json* raw(const char* k) { return get(k); }
  bool has(const char* k) const { return j_.contains(k); }
  void fail_with(std::string why) {
    if (why_.empty()) why_ = std::move(why);
  }
  // Every key of the object must be one this phase has.
  void only(std::initializer_list<const char*> allowed) {
    for (const auto& [k, v] : j_.items()) {
      bool known = false;
      for (const char* a : allowed) known = known || k == a;
      if (!known) return fail_with(fmt::format("unknown field \"{}\"", k));
    }
  }

 private:
  const Json* get(const char* k) {
    auto it = j_.find(k);
    if (it == j_.end()) {
      fail_with(fmt::format("missing field \"{}\"", k));
      return nullptr;
    }
    return &*it;
  }
  void mistyped(const char* k, const char* want) { fail_with(fmt::format("field \"{}\" is not {}", k, want)); }
  const Json& j_;
  std::string why_;
};

#define AIRLOCK_INTENT_KEYS \
  "attempt_id", "key", "tool", "args_hash", "run_id", "span", "workdir", "started_at", "approval_id"
#define AIRLOCK_OUTCOME_KEYS "status", "error", "finished_at", "wall_ms"

// A record written before attempt ids pairs by (idempotency key, start time), as the design says:
// its attempt is named by those two.
std::string legacy_attempt(const std::string& key, int64_t started_at) {
  return fmt::format("legacy:{}@{}", key, started_at);
}

void read_intent(Fields& f, EffectIntent& i) {
  bool legacy = !f.has("attempt_id");
  if (!legacy) i.attempt_id = f.str("attempt_id");
  i.key = f.str("key");
  i.tool = f.str("tool");
  i.args_hash = f.str("args_hash");
  i.run_id = f.str("run_id");
  i.span = f.str("span");
  i.workdir = f.str("workdir");
  i.started_at = f.i64("started_at");
  if (f.has("approval_id")) {
    i.approval_id = f.str("approval_id");
    if (f.ok() && i.approval_id.empty()) f.fail_with("empty approval_id");
  }
  if (legacy && f.ok()) i.attempt_id = legacy_attempt(i.key, i.started_at);
  if (f.ok() && i.attempt_id.empty()) f.fail_with("empty attempt_id");
}

void read_outcome(Fields& f, EffectOutcome& o) {
  o.key = f.str("key");
  // Without an attempt id (a legacy record) the outcome carries its intent's start time instead.
  if (f.has("attempt_id")) {
    o.attempt_id = f.str("attempt_id");
  } else {
    int64_t started_at = f.i64("started_at");
    if (f.ok()) o.attempt_id = legacy_attempt(o.key, started_at);
  }
  std::string status = f.str("status");
  o.finished_at = f.i64("finished_at");
  o.wall_ms = f.num("wall_ms");
  const Json* err = f.raw("error");
  if (!f.ok()) return;
  if (status != "ok" && status != "error") return f.fail_with(fmt::format("unknown status \"{}\"", status));
  o.ok = status == "ok";
  if (o.ok) {
    if (!err->is_null()) f.fail_with("an ok outcome carries an error");
    return;
  }
  if (!err->is_object() || !err->contains("code") || !(*err)["code"].is_string() || !err->contains("message") ||
      !(*err)["message"].is_string() || err->size() != 2)
    return f.fail_with("an error outcome's \"error\" must be {\"code\": string, \"message\": string}");
  auto code = code_from_name((*err)["code"].get<std::string>());
  if (!code) return f.fail_with(fmt::format("unknown error code \"{}\"", (*err)["code"].get<std::string>()));
  o.error = Error{*code, (*err)["message"].get<std::string>(), Json::object()};
}

// Strict UTF-8, then JSON, then an object of a known phase with exactly its fields.
std::optional<std::string> decode(std::string_view bytes, Decoded& d) {
  if (!is_valid_utf8(bytes)) return "not valid UTF-8";
  auto parsed = parse_json(bytes, Code::LedgerCorrupt, "the record");
  // "not JSON" leads, as the reason always has; parse_json says what exactly (depth, 1e400, syntax).
  if (!parsed) return fmt::format("not JSON: {}", parsed.error().message);
  Json& j = *parsed;
  if (!j.is_object()) return "not a JSON object";
  // The exact bytes of strings the writer had to write lossy (append_line): kept in the file,
  // beside any phase's fields.
  if (j.contains(kNotUtf8Key) && !j[kNotUtf8Key].is_array()) return fmt::format("\"{}\" is not an array", kNotUtf8Key);
  j.erase(kNotUtf8Key);
  Fields f(j);
  std::string phase = f.str("phase");
  if (!f.ok()) return f.why();
  if (phase == "intent") {
    d.phase = Phase::Intent;
    f.only({"phase", AIRLOCK_INTENT_KEYS});
    read_intent(f, d.intent);
  } else if (phase == "outcome") {
    d.phase = Phase::Outcome;
    if (f.has("attempt_id"))
      f.only({"phase", "attempt_id", "key", AIRLOCK_OUTCOME_KEYS});
    else
      f.only({"phase", "key", "started_at", AIRLOCK_OUTCOME_KEYS});
    read_outcome(f, d.outcome);
  } else if (phase == "single") {
    d.phase = Phase::Single;
    f.only({"phase", AIRLOCK_INTENT_KEYS, AIRLOCK_OUTCOME_KEYS});
    read_intent(f, d.intent);
    read_outcome(f, d.outcome);
  } else if (phase == "torn") {
    d.phase = Phase::Torn;
    f.only({"phase", "offset", "length", "sha256", "bytes_b64", "repaired_at"});
    d.torn.offset = f.u64("offset");
    d.torn.length = f.u64("length");
    d.torn.sha256 = f.str("sha256");
    d.torn.bytes_b64 = f.str("bytes_b64");
    d.torn.repaired_at = f.i64("repaired_at");
  } else {
    return fmt::format("unknown phase \"{}\"", phase);
  }
  if (!f.ok()) return f.why();
  return std::nullopt;
}

Json corrupt_json(const CorruptLine& c) {
  return {{"line", c.line}, {"offset", c.offset}, {"length", c.length}, {"sha256", c.sha256}, {"reason", c.reason}};
}

Json intent_json_view(const EffectIntent& i) {
  Json j = Json::object();
  put_intent(j, i);
  return j;
}

// ---- the repair lock -------------------------------------------------------------------------

// <path>.repair-lock, created with O_EXCL; a lock older than kRepairLockStaleMs belongs to a
// writer that died mid-repair and is taken over. Removed on destruction.
class RepairLock {
 public:
  static Result<RepairLock> acquire(const std::string& ledger_path, bool* stole) {
    std::string path = ledger_path + ".repair-lock";
    auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(3 * kRepairLockStaleMs);
    for (;;) {
      UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
      if (fd) {
        std::string owner = std::to_string(::getpid()) + "\n";
        (void)!::write(fd.get(), owner.data(), owner.size());
        return RepairLock(path);
      }
      if (errno != EEXIST) return fail_errno(Code::LedgerWriteFailed, "create " + path, errno);
      struct stat st{};
      if (::stat(path.c_str(), &st) == 0) {
        int64_t age = now_ms() - (static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000);
        if (age > kRepairLockStaleMs) {
          // Take over by renaming aside only the very lock judged stale (same inode): a fresh
          // lock made meanwhile by another writer is left alone.
          std::string aside = path + ".stale-" + random_id();
          struct stat again{};
          if (::stat(path.c_str(), &again) == 0 && again.st_ino == st.st_ino &&
              ::rename(path.c_str(), aside.c_str()) == 0) {
            ::unlink(aside.c_str());
            *stole = true;
          }
          continue;
        }
      }
      if (std::chrono::steady_clock::now() > give_up)
        return fail(Code::LedgerWriteFailed, fmt::format("the repair lock {} stays held", path), {{"lock", path}});
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  RepairLock(RepairLock&& o) noexcept : path_(std::exchange(o.path_, {})) {}
  RepairLock& operator=(RepairLock&&) = delete;
  ~RepairLock() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }

 private:
  explicit RepairLock(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// Finds the bytes after the last newline and terminates or quarantines them. Runs with the
// lock held, on a descriptor without O_APPEND (pwrite honours its offset only there).
Result<RepairReport> repair_tail(const std::string& path) {
  RepairReport rep;
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd) return fail_errno(Code::LedgerWriteFailed, "open " + path + " for repair", errno);
  struct stat st{};
  if (::fstat(fd.get(), &st) < 0) return fail_errno(Code::LedgerWriteFailed, "fstat " + path, errno);
  auto size = static_cast<uint64_t>(st.st_size);
  // Read backwards until a newline: only the unterminated tail matters here.
  std::string tail;
  uint64_t start = size;
  while (start > 0) {
    uint64_t chunk = std::min<uint64_t>(start, 65536);
    std::string buf(chunk, '\0');
    ssize_t n = ::pread(fd.get(), buf.data(), chunk, static_cast<off_t>(start - chunk));
    if (n != static_cast<ssize_t>(chunk)) return fail_errno(Code::LedgerWriteFailed, "read " + path, errno);
    auto nl = buf.rfind('\n');
    if (nl != std::string::npos) {
      tail = buf.substr(nl + 1) + tail;
      start = start - chunk + nl + 1;
      break;
    }
    tail = buf + tail;
    start -= chunk;
  }
  if (tail.empty()) return rep;
  Decoded d;
  if (!decode(tail, d)) {
    TRY(write_all_at(fd.get(), "\n", size, Code::LedgerWriteFailed, "terminate the last record of " + path));
    rep.terminated = true;
  } else {
    TornArtifact t;
    t.offset = start;
    t.length = tail.size();
    t.sha256 = sha256_hex(tail);
    t.bytes_b64 = base64_encode(tail);
    t.repaired_at = now_ms();
    std::string line = canonical_json(torn_record(t)) + "\n";
    // The torn line is longer than the fragment (base64 alone is), so writing it at the
    // fragment's offset covers every byte of it: no moment has the fragment cut and not kept.
    TRY(write_all_at(fd.get(), line, start, Code::LedgerWriteFailed, "quarantine the torn tail of " + path));
    if (::ftruncate(fd.get(), static_cast<off_t>(start + line.size())) < 0)
      return fail_errno(Code::LedgerWriteFailed, "truncate " + path, errno);
    rep.quarantined = t;
  }
  if (::fdatasync(fd.get()) < 0) return fail_errno(Code::LedgerWriteFailed, "fdatasync " + path, errno);
  return rep;
}

}  // namespace

Json intent_record(const EffectIntent& i) {
  Json j = {{"phase", "intent"}};
  put_intent(j, i);
  return j;
}

Json outcome_record(const EffectOutcome& o) {
  Json j = {{"phase", "outcome"}};
  put_outcome(j, o);
  return j;
}

Json single_record(const EffectIntent& i, const EffectOutcome& o) {
  Json j = {{"phase", "single"}};
  put_intent(j, i);
  put_outcome(j, o);
  return j;
}

// ---- the writer ------------------------------------------------------------------------------

Result<EffectLedger> EffectLedger::open(const std::string& path, LedgerOptions options) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!fd) return fail_errno(Code::LedgerWriteFailed, "open the effect ledger " + path, errno);
  EffectLedger led(path, options, std::move(fd));
  bool stole = false;
  auto lock = TRY(RepairLock::acquire(path, &stole));
  // Read under the lock: another writer may have repaired (and appended) while we waited.
  led.repair_ = TRY(repair_tail(path));
  led.repair_.stole_stale_lock = stole;
  return led;
}

Result<void> EffectLedger::append_line(const Json& record, bool sync) {
  if (broken_)
    return fail(Code::LedgerWriteFailed, "an earlier write to this ledger failed; reopen it to repair",
                {{"path", path_}});
  // A record is never lost to an encoding: strings that are not UTF-8 (a tool's error message,
  // say) are written lossy, their exact bytes beside them.
  Json r = record;
  if (Json exact = repair_utf8(r); !exact.empty()) r[kNotUtf8Key] = std::move(exact);
  std::string line = canonical_json(r) + "\n";
  if (auto w = append_record(fd_.get(), line, Code::LedgerWriteFailed, "append to the effect ledger " + path_); !w) {
    broken_ = true;
    return w;
  }
  if (sync && ::fdatasync(fd_.get()) < 0) {
    broken_ = true;
    return fail_errno(Code::LedgerWriteFailed, "fdatasync the effect ledger " + path_, errno);
  }
  return {};
}

Result<void> EffectLedger::append_intent(const EffectIntent& intent) {
  if (!options_.intents)
    return fail(Code::LedgerWriteFailed, "this ledger keeps the single-record form; it takes no intents",
                {{"path", path_}});
  return append_line(intent_record(intent), options_.fsync);
}

Result<void> EffectLedger::append_outcome(const EffectOutcome& outcome) {
  // No fsync: an outcome lost to power loss leaves its intent an orphan, which reconciliation
  // handles; an intent lost would leave an effect nobody knows of.
  return append_line(outcome_record(outcome), false);
}

Result<void> EffectLedger::append_single(const EffectIntent& intent, const EffectOutcome& outcome) {
  return append_line(single_record(intent, outcome), options_.fsync);
}

Result<void> EffectLedger::intent(const EffectIntent& i) {
  if (!options_.intents) return {};
  return append_intent(i);
}

Result<void> EffectLedger::outcome(const EffectIntent& i, const EffectOutcome& o) {
  return options_.intents ? append_outcome(o) : append_single(i, o);
}

// ---- the scanner -----------------------------------------------------------------------------

Json LedgerScan::to_json() const {
  Json r = Json::array();
  for (const auto& row : rows) {
    Json j = row.single ? single_record(row.intent, row.outcome) : intent_json_view(row.intent);
    j.erase("phase");
    put_outcome(j, row.outcome);
    j["single"] = row.single;
    j["line"] = row.line;
    r.push_back(std::move(j));
  }
  Json o = Json::array();
  for (const auto& orphan : orphans) {
    Json j = intent_json_view(orphan.intent);
    j["line"] = orphan.line;
    j["offset"] = orphan.offset;
    o.push_back(std::move(j));
  }
  Json t = Json::array();
  for (const auto& a : torn) {
    Json j = torn_record(a);
    j.erase("phase");
    j["line"] = a.line;
    t.push_back(std::move(j));
  }
  Json c = Json::array();
  for (const auto& x : corrupt) c.push_back(corrupt_json(x));
  Json tl = nullptr;
  if (tail)
    tl = {{"offset", tail->offset},
          {"length", tail->length},
          {"sha256", tail->sha256},
          {"complete_record", tail->complete_record}};
  return {{"rows", r},   {"orphans", o},         {"torn", t},    {"corrupt", c},
          {"tail", tl},  {"lines", lines},       {"bytes", bytes}};
}

Result<LedgerScan> scan_ledger_bytes(std::string_view bytes, bool tolerant) {
  LedgerScan scan;
  scan.bytes = bytes.size();
  struct Pending {
    EffectIntent intent;
    uint64_t line, offset;
    bool done = false;
  };
  std::vector<Pending> intents;
  std::unordered_map<std::string, size_t> by_attempt;
  size_t pos = 0;
  uint64_t line_no = 0;
  auto corrupt = [&](uint64_t off, std::string_view b, std::string reason) {
    scan.corrupt.push_back({line_no, off, b.size(), sha256_hex(b), std::move(reason)});
  };
  while (pos < bytes.size()) {
    size_t nl = bytes.find('\n', pos);
    if (nl == std::string_view::npos) break;  // the live tail, below
    std::string_view b = bytes.substr(pos, nl - pos);
    uint64_t off = pos;
    pos = nl + 1;
    ++line_no;
    Decoded d;
    if (auto why = decode(b, d)) {
      corrupt(off, b, std::move(*why));
      continue;
    }
    switch (d.phase) {
      case Phase::Intent: {
        auto [it, fresh] = by_attempt.emplace(d.intent.attempt_id, intents.size());
        if (!fresh) {
          corrupt(off, b, fmt::format("a second intent for attempt {}", d.intent.attempt_id));
          break;
        }
        intents.push_back({std::move(d.intent), line_no, off});
        break;
      }
      case Phase::Outcome: {
        auto it = by_attempt.find(d.outcome.attempt_id);
        if (it == by_attempt.end()) {
          corrupt(off, b, fmt::format("an outcome for attempt {}, which has no intent before it", d.outcome.attempt_id));
          break;
        }
        Pending& p = intents[it->second];
        if (p.done) {
          corrupt(off, b, fmt::format("a second outcome for attempt {}", d.outcome.attempt_id));
          break;
        }
        if (p.intent.key != d.outcome.key) {
          corrupt(off, b, fmt::format("the outcome's key differs from its intent's (line {})", p.line));
          break;
        }
        p.done = true;
        scan.rows.push_back({std::move(p.intent), std::move(d.outcome), false, p.line, line_no});
        break;
      }
      case Phase::Single:
        scan.rows.push_back({std::move(d.intent), std::move(d.outcome), true, line_no, line_no});
        break;
      case Phase::Torn:
        d.torn.line = line_no;
        scan.torn.push_back(std::move(d.torn));
        break;
    }
  }
  scan.lines = line_no;
  if (pos < bytes.size()) {
    std::string_view t = bytes.substr(pos);
    Decoded d;
    scan.tail = LiveTail{pos, t.size(), sha256_hex(t), !decode(t, d).has_value()};
  }
  for (auto& p : intents)
    if (!p.done) scan.orphans.push_back({std::move(p.intent), p.line, p.offset});
  if (!scan.corrupt.empty() && !tolerant) {
    Json problems = Json::array();
    for (size_t i = 0; i < scan.corrupt.size() && i < 100; ++i) problems.push_back(corrupt_json(scan.corrupt[i]));
    const auto& first = scan.corrupt.front();
    return fail(Code::LedgerCorrupt,
                fmt::format("{} line(s) of the ledger cannot be read as written; the first is line {} at byte {}: {}",
                            scan.corrupt.size(), first.line, first.offset, first.reason),
                {{"problems", problems}, {"count", scan.corrupt.size()}});
  }
  return scan;
}

Result<LedgerScan> scan_ledger(const std::string& path, bool tolerant) {
  auto bytes = read_file(path, Code::LedgerCorrupt);
  if (!bytes) return std::unexpected(std::move(bytes).error().fact("path", path));
  auto scan = scan_ledger_bytes(*bytes, tolerant);
  if (!scan) return std::unexpected(std::move(scan).error().fact("path", path));
  return scan;
}

}  // namespace airlock::ledger
