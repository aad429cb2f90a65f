// Receipts: the hash chain, written one line per write(2), and its verifier.
#include "ledger/receipts.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <ctime>

#include "base/clock.h"
#include "base/fs.h"
#include "base/hash.h"

namespace airlock::ledger {

std::string now_rfc3339() {
  int64_t us = now_us();
  std::time_t secs = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, us % 1000000);
}

Result<ReceiptLog> ReceiptLog::create(const std::string& path, std::string session_id) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return fail_errno(Code::LedgerWriteFailed, "cannot create receipts file " + path, errno);
  return ReceiptLog(path, std::move(session_id), std::move(fd));
}

Result<Json> ReceiptLog::append(std::string_view kind, Json body) {
  if (broken_)
    return fail(Code::LedgerWriteFailed, fmt::format("{} failed an earlier write; it takes no more receipts", path_));
  Json r = body.is_object() ? std::move(body) : Json::object();
  for (const auto& [k, v] : stamps_.items())
    if (!r.contains(k)) r[k] = v;
  // A receipt is never lost to an encoding: bytes from a sandbox (a file name, a header, a
  // tool's output) that are not UTF-8 are written lossy and, beside them, exactly.
  if (Json exact = repair_utf8(r); !exact.empty()) r[std::string(kNotUtf8Key)] = std::move(exact);
  r["schema"] = kReceiptSchema;
  r["session"] = session_;
  r["seq"] = seq_;
  r["ts"] = now_rfc3339();
  r["kind"] = kind;
  r["prev"] = prev_;
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
  ChainCheck out;
  std::string prev(kGenesis);
  size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    ++line_no;
    if (nl == std::string::npos)
      return fail(Code::LedgerCorrupt, fmt::format("{}: line {} has no newline (torn write)", path, line_no),
                  {{"line", line_no}});
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
    if ((*j)["seq"] != out.receipts)
      return fail(Code::LedgerCorrupt, fmt::format("{}: line {} is out of sequence", path, line_no),
                  {{"line", line_no}, {"expected_seq", out.receipts}});
    prev = sha256_hex(line);
    ++out.receipts;
    pos = nl + 1;
  }
  out.last_hash = prev;
  return out;
}

}  // namespace airlock::ledger
