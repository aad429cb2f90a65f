// Receipts: the hash chain, written one line per write(2), and its verifier.
#include "ledger/receipts.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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
  ChainCheck check{0, std::string(kGenesis)};
  std::string session;    // the last complete receipt's
  size_t tail_offset = 0;  // where the bytes after the last newline start (== size: none)
  std::vector<Json> receipts;  // each complete line, when asked to keep them
  std::vector<uint64_t> starts;  // and where each starts in `text`
  std::vector<std::string> hashes;  // and its sha256
};

// Every complete line of `text`, in order, chaining on `out.check` (a log's start: 0 receipts
// and kGenesis); stops at the first that does not verify, `out` holding what did.
Result<void> scan_chain(std::string_view text, const std::string& path, Scan& out, bool keep = false) {
  size_t pos = 0;
  while (true) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) break;
    uint64_t line_no = out.check.receipts + 1;
    std::string_view line(text.data() + pos, nl - pos);
    // Receipts are written canonical, hence without duplicate keys; one with them is not ours.
    auto j = parse_json(line, Code::LedgerCorrupt, fmt::format("{} line {}", path, line_no), kReceiptLineLimits);
    if (!j) return std::unexpected(std::move(j.error()).fact("line", line_no));
    if (!j->is_object() || !j->contains("prev") || !(*j)["prev"].is_string() || !j->contains("seq"))
      return fail(Code::LedgerCorrupt, fmt::format("{}: line {} is not a receipt", path, line_no), {{"line", line_no}});
    if ((*j)["prev"] != out.check.last_hash)
      return fail(Code::LedgerCorrupt,
                  fmt::format("{}: the chain breaks at line {}: prev does not match line {}", path, line_no, line_no - 1),
                  {{"line", line_no}, {"expected_prev", out.check.last_hash}, {"found_prev", (*j)["prev"]}});
    if ((*j)["seq"] != out.check.receipts)
      return fail(Code::LedgerCorrupt, fmt::format("{}: line {} is out of sequence", path, line_no),
                  {{"line", line_no}, {"expected_seq", out.check.receipts}});
    out.check.last_hash = sha256_hex(line);
    ++out.check.receipts;
    if ((*j).contains("session") && (*j)["session"].is_string()) out.session = (*j)["session"];
    if (keep) {
      out.starts.push_back(pos);
      out.receipts.push_back(std::move(*j));
      out.hashes.push_back(out.check.last_hash);
    }
    pos = nl + 1;
    out.tail_offset = pos;
  }
  return {};
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
  Scan scan;
  TRY(scan_chain(text, path, scan));
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

namespace {

// The bytes of `path` from `offset` up to `end` (the file's size when nullopt): about max_bytes,
// but up to the end of the first line when that is longer. `size` gets the end used.
Result<std::string> read_from(const std::string& path, uint64_t offset, std::optional<uint64_t> end,
                              uint64_t max_bytes, uint64_t& size) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fail_errno(Code::LedgerCorrupt, "cannot open " + path, errno);
  struct stat st{};
  if (::fstat(fd.get(), &st) < 0) return fail_errno(Code::LedgerCorrupt, "cannot stat " + path, errno);
  size = std::min<uint64_t>(static_cast<uint64_t>(st.st_size), end.value_or(UINT64_MAX));
  if (offset > size)
    return fail(Code::LedgerCorrupt, fmt::format("{} is shorter ({} bytes) than it was read to ({})", path, size, offset),
                {{"offset", offset}, {"size", size}});
  uint64_t want = std::min<uint64_t>(size - offset, std::max<uint64_t>(max_bytes, 1));
  std::string text;
  for (;;) {
    size_t had = text.size();
    text.resize(want);
    while (had < text.size()) {
      ssize_t n = ::pread(fd.get(), text.data() + had, text.size() - had, static_cast<off_t>(offset + had));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fail_errno(Code::LedgerCorrupt, "cannot read " + path, errno);
      if (n == 0) break;
      had += static_cast<size_t>(n);
    }
    bool short_read = had < text.size();
    text.resize(had);
    if (short_read || text.find('\n') != std::string::npos || offset + text.size() >= size) break;
    want = std::min<uint64_t>(size - offset, text.size() * 2 + 4096);  // no whole line yet: read on
  }
  return text;
}

}  // namespace

Result<ChainPage> read_chain(const std::string& path, const ChainCursor& from, uint64_t max_bytes) {
  uint64_t size = 0;
  std::string text = TRY(read_from(path, from.offset, std::nullopt, max_bytes, size));
  ChainPage page;
  Scan scan;
  scan.check = {from.receipts, from.last_hash};
  if (auto r = scan_chain(text, path, scan, true); !r) page.broken = r.error();  // the page ends before it
  page.receipts = std::move(scan.receipts);
  page.sha256 = std::move(scan.hashes);
  for (uint64_t s : scan.starts) page.offsets.push_back(from.offset + s);
  page.next = {from.offset + scan.tail_offset, scan.check.receipts, scan.check.last_hash};
  page.more = !page.broken && from.offset + text.size() < size;
  return page;
}

Result<ChainPage> read_lines(const std::string& path, uint64_t offset, uint64_t end, uint64_t max_bytes) {
  uint64_t size = 0;
  std::string text = TRY(read_from(path, offset, end, max_bytes, size));
  ChainPage page;
  page.next.offset = offset;
  for (size_t pos = 0, nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    std::string_view line = std::string_view(text).substr(pos, nl - pos);
    auto j = parse_json(line, Code::LedgerCorrupt, fmt::format("{} at offset {}", path, offset + pos), kReceiptLineLimits);
    if (!j) {
      page.broken = j.error();
      break;
    }
    page.receipts.push_back(std::move(*j));
    page.offsets.push_back(offset + pos);
    page.sha256.push_back(sha256_hex(line));
    page.next.offset = offset + nl + 1;
  }
  page.more = !page.broken && page.next.offset < size;
  return page;
}

Result<TailRepair> repair_torn_tail(const std::string& path) {
  // Without O_APPEND: pwrite honours its offset only there.
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fail_errno(Code::LedgerWriteFailed, "open " + path + " for repair", errno);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) < 0)
    return fail_errno(Code::LedgerWriteFailed,
                      path + " is locked: its session is still writing it (repair it after the session ends)", errno);
  std::string text = TRY(read_file(fmt::format("/proc/self/fd/{}", fd.get()), Code::LedgerCorrupt));
  Scan scan;
  TRY(scan_chain(text, path, scan));
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
