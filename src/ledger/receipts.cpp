// Receipts: the hash chain, written one line per write(2), and its verifier.
#include "ledger/receipts.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <ctime>
#include <filesystem>

#include "base/clock.h"
#include "base/encoding.h"
#include "base/fs.h"
#include "base/hash.h"

namespace airlock::ledger {

std::string now_rfc3339() { return utc_text(now_us(), 6); }

Result<ReceiptLog> ReceiptLog::create(const std::string& path, std::string session_id) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return fail_errno(Code::LedgerWriteFailed, "cannot create receipts file " + path, errno);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) < 0)
    return fail_errno(Code::LedgerWriteFailed, "cannot lock receipts file " + path, errno);
  return ReceiptLog(path, std::move(session_id), std::move(fd));
}

namespace {

void stamp_header(Json& r, const std::string& session, uint64_t seq, std::string_view kind, const std::string& prev) {
  r["schema"] = kReceiptSchema;
  r["session"] = session;
  r["seq"] = seq;
  r["ts"] = now_rfc3339();
  r["kind"] = kind;
  r["prev"] = prev;
}

struct Scan {
  ChainCheck check;
  std::string session;    // the last complete receipt's
  size_t tail_offset = 0;  // where the bytes after the last newline start (== size: none)
};

// Every complete line, in order; stops at the first that does not verify.
Result<Scan> scan_chain(std::string_view text, const std::string& path) {
  Scan out;
  std::string prev(kGenesis);
  size_t pos = 0, line_no = 0;
  while (true) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) break;
    ++line_no;
    std::string_view line(text.data() + pos, nl - pos);
    // Receipts are written canonical, hence without duplicate keys; one with them is not ours.
    auto j = parse_json(line, Code::LedgerCorrupt, fmt::format("{} line {}", path, line_no), kReceiptLineLimits);
    if (!j) return std::unexpected(std::move(j.error()).fact("line", line_no));
    if (!j->is_object() || !j->contains("prev") || !(*j)["prev"].is_string() || !j->contains("seq"))
      return fail(Code::LedgerCorrupt, fmt::format("{}: line {} is not a receipt", path, line_no), {{"line", line_no}});
    if ((*j)["prev"] != prev)
      return fail(Code::LedgerCorrupt,
                  fmt::format("{}: the chain breaks at line {}: prev does not match line {}", path, line_no, line_no - 1),
                  {{"line", line_no}, {"expected_prev", prev}, {"found_prev", (*j)["prev"]}});
    if ((*j)["seq"] != out.check.receipts)
      return fail(Code::LedgerCorrupt, fmt::format("{}: line {} is out of sequence", path, line_no),
                  {{"line", line_no}, {"expected_seq", out.check.receipts}});
    prev = sha256_hex(line);
    ++out.check.receipts;
    if ((*j).contains("session") && (*j)["session"].is_string()) out.session = (*j)["session"];
    pos = nl + 1;
  }
  out.check.last_hash = prev;
  out.tail_offset = pos;
  return out;
}

}  // namespace

Result<Json> ReceiptLog::append(std::string_view kind, Json body) {
  if (broken_)
    return fail(Code::LedgerWriteFailed, fmt::format("{} failed an earlier write; it takes no more receipts", path_));
  Json r = body.is_object() ? std::move(body) : Json::object();
  for (const auto& [k, v] : stamps_.items())
    if (!r.contains(k)) r[k] = v;
  // A receipt is never lost to an encoding: bytes from a sandbox (a file name, a header, a
  // tool's output) that are not UTF-8 are written lossy and, beside them, exactly.
  if (Json exact = repair_utf8(r); !exact.empty()) r[std::string(kNotUtf8Key)] = std::move(exact);
  stamp_header(r, session_, seq_, kind, prev_);
  std::string line;
  try {
    line = canonical_json(r);
  } catch (const std::exception& e) {  // unreachable after repair_utf8; never thrown past here
    return fail(Code::LedgerWriteFailed, fmt::format("a receipt for {} cannot be serialised: {}", kind, e.what()));
  }
  std::string hash = sha256_hex(line);
  line.push_back('\n');
  if (auto w = append_record(fd_.get(), line, Code::LedgerWriteFailed, "cannot append to " + path_); !w) {
    broken_ = true;
    return std::unexpected(std::move(w).error());
  }
  prev_ = std::move(hash);
  ++seq_;
  bytes_ += line.size();
  return r;
}

Result<ChainCheck> verify_chain(const std::string& path) {
  std::string text = TRY(read_file(path, Code::LedgerCorrupt));
  Scan scan = TRY(scan_chain(text, path));
  if (scan.tail_offset < text.size()) {
    uint64_t line = scan.check.receipts + 1, length = text.size() - scan.tail_offset;
    return fail(Code::LedgerCorrupt,
                fmt::format("{}: line {} has no newline (torn write: {} byte(s) at offset {}); the {} receipt(s) before "
                            "it verify; `airlock receipts repair {}` keeps the bytes in a receipt and closes the chain",
                            path, line, length, scan.tail_offset, scan.check.receipts, path),
                {{"line", line},
                 {"receipts", scan.check.receipts},
                 {"torn_tail", {{"offset", scan.tail_offset}, {"length", length}}}});
  }
  return scan.check;
}

Result<TailRepair> repair_torn_tail(const std::string& path) {
  // Without O_APPEND: pwrite honours its offset only there.
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fail_errno(Code::LedgerWriteFailed, "open " + path + " for repair", errno);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) < 0)
    return fail_errno(Code::LedgerWriteFailed,
                      path + " is locked: its session is still writing it (repair it after the session ends)", errno);
  std::string text = TRY(read_file(fmt::format("/proc/self/fd/{}", fd.get()), Code::LedgerCorrupt));
  Scan scan = TRY(scan_chain(text, path));
  TailRepair rep;
  rep.receipts = scan.check.receipts;
  if (scan.tail_offset == text.size()) return rep;
  std::string_view tail = std::string_view(text).substr(scan.tail_offset);
  rep.offset = scan.tail_offset;
  rep.length = tail.size();
  auto whole = parse_json(tail, Code::LedgerCorrupt, "the tail", kReceiptLineLimits);
  if (whole && whole->is_object() && whole->value("prev", Json()) == scan.check.last_hash &&
      whole->value("seq", Json()) == scan.check.receipts) {
    TRY(write_all_at(fd.get(), "\n", text.size(), Code::LedgerWriteFailed, "terminate the last receipt of " + path));
    rep.terminated = true;
  } else {
    std::string session = scan.session;
    if (session.empty()) session = std::filesystem::path(path).stem().string();  // <session>.jsonl
    if (!is_valid_utf8(session)) session = "unknown";  // a file name is bytes; a receipt is JSON
    Json r = {{"offset", rep.offset}, {"length", rep.length}, {"sha256", sha256_hex(tail)},
              {"bytes_b64", base64_encode(tail)}};
    stamp_header(r, session, scan.check.receipts, "receipts.torn_tail", scan.check.last_hash);
    // The repaired log is written whole beside the torn one and renamed over it: a kill or power
    // lost at any moment leaves one or the other, never the tail cut and not kept.
    std::string repaired = text.substr(0, rep.offset) + canonical_json(r) + "\n";
    std::string tmp = path + ".repair-" + random_id().substr(0, 12);
    UniqueFd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out) return fail_errno(Code::LedgerWriteFailed, "create " + tmp, errno);
    auto written = write_all(out.get(), repaired, Code::LedgerWriteFailed, "write " + tmp);
    if (written && ::fdatasync(out.get()) < 0) written = fail_errno(Code::LedgerWriteFailed, "fdatasync " + tmp, errno);
    if (written && ::rename(tmp.c_str(), path.c_str()) < 0)
      written = fail_errno(Code::LedgerWriteFailed, "rename " + tmp + " over " + path, errno);
    if (!written) {
      ::unlink(tmp.c_str());
      return std::unexpected(std::move(written).error());
    }
    std::string dir = std::filesystem::path(path).parent_path().string();
    UniqueFd d(::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!d || ::fsync(d.get()) < 0) return fail_errno(Code::LedgerWriteFailed, "fsync " + dir, errno);
    rep.quarantined = true;
    ++rep.receipts;
    return rep;
  }
  ++rep.receipts;
  if (::fdatasync(fd.get()) < 0) return fail_errno(Code::LedgerWriteFailed, "fdatasync " + path, errno);
  return rep;
}

}  // namespace airlock::ledger
