// Unit tests for the hash-chained receipt log: appending, verifying, and detecting tampering.
#include "scratch_dir.h"
#include "ledger/receipts.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "base/encoding.h"
#include "base/fs.h"
#include "base/hash.h"

namespace airlock::ledger {
namespace {

namespace fs = std::filesystem;

using TempDir = airlock::testing::ScratchDir;

std::string read_text(const std::string& path) {
  auto t = read_file(path);
  EXPECT_TRUE(t.has_value()) << t.error().message;
  return t ? *t : std::string();
}

void write_text(const std::string& path, const std::string& text) {
  auto w = write_file_atomic(path, text, 0600);
  ASSERT_TRUE(w.has_value()) << w.error().message;
}

// The lines of a log, without their newlines (a final line without one is kept too).
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) {
      out.push_back(text.substr(pos));
      break;
    }
    out.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// Writes a log of `n` receipts at `path` and returns its text.
std::string write_log(const std::string& path, int n) {
  auto log = ReceiptLog::create(path, "session-1");
  EXPECT_TRUE(log.has_value()) << log.error().message;
  if (!log) return {};
  for (int i = 0; i < n; ++i) {
    auto r = log->append("step", Json{{"n", i}, {"note", fmt::format("receipt number {}", i)}});
    EXPECT_TRUE(r.has_value()) << r.error().message;
  }
  return read_text(path);
}

// The refusal's facts.line, or 0 if verify_chain accepted the log or gave no line.
uint64_t broken_line(const Result<ChainCheck>& r) {
  if (r) return 0;
  return r.error().facts.value("line", uint64_t{0});
}

// ---------------------------------------------------------------- a good chain

// The chain's hash, against FIPS 180-2's known answers (and a file read in more than one block).
TEST(Sha256, GivesTheStandardsKnownAnswers) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  testing::ScratchDir dir;
  ASSERT_TRUE(write_file_atomic(dir.file("million-a"), std::string(1'000'000, 'a')));
  EXPECT_EQ(*sha256_file(dir.file("million-a")), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_FALSE(sha256_file(dir.file("absent")));
}

TEST(ReceiptLog, AppendsFormAChainThatVerifies) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  auto log = ReceiptLog::create(path, "session-1");
  ASSERT_TRUE(log.has_value()) << log.error().message;
  std::vector<Json> written;
  for (int i = 0; i < 5; ++i) {
    auto r = log->append(i == 0 ? "session_start" : "action", Json{{"n", i}});
    ASSERT_TRUE(r.has_value()) << r.error().message;
    written.push_back(*r);
  }
  EXPECT_EQ(log->count(), 5u);
  EXPECT_EQ(log->path(), path);

  const auto lines = lines_of(read_text(path));
  ASSERT_EQ(lines.size(), 5u);
  std::string prev(kGenesis);
  for (size_t i = 0; i < lines.size(); ++i) {
    SCOPED_TRACE(i);
    // append returns the receipt exactly as written, one canonical line each.
    EXPECT_EQ(lines[i], canonical_json(written[i]));
    Json j = Json::parse(lines[i]);
    EXPECT_EQ(j.at("schema"), kReceiptSchema);
    EXPECT_EQ(j.at("session"), "session-1");
    EXPECT_EQ(j.at("seq"), i);
    EXPECT_EQ(j.at("n"), i);
    EXPECT_EQ(j.at("prev"), prev);
    EXPECT_TRUE(j.at("ts").is_string());
    prev = sha256_hex(lines[i]);
  }

  auto check = verify_chain(path);
  ASSERT_TRUE(check.has_value()) << check.error().message;
  EXPECT_EQ(check->receipts, 5u);
  EXPECT_EQ(check->last_hash, sha256_hex(lines.back()));
}

TEST(ReceiptLog, FirstReceiptChainsFromGenesis) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  write_log(path, 1);
  const auto lines = lines_of(read_text(path));
  ASSERT_EQ(lines.size(), 1u);
  Json first = Json::parse(lines[0]);
  EXPECT_EQ(first.at("prev"), kGenesis);
  EXPECT_EQ(first.at("seq"), 0);
  EXPECT_EQ(kGenesis, std::string(64, '0'));
}

TEST(ReceiptLog, EmptyLogVerifiesWithNoReceipts) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  write_log(path, 0);
  auto check = verify_chain(path);
  ASSERT_TRUE(check.has_value()) << check.error().message;
  EXPECT_EQ(check->receipts, 0u);
  EXPECT_EQ(check->last_hash, kGenesis);
}

TEST(ReceiptLog, BodyCannotOverrideTheChainFields) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  auto log = ReceiptLog::create(path, "session-1");
  ASSERT_TRUE(log.has_value()) << log.error().message;
  auto r = log->append("action", Json{{"prev", "forged"},
                                      {"seq", 99},
                                      {"session", "other"},
                                      {"schema", "x"},
                                      {"kind", "y"}});
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->at("prev"), kGenesis);
  EXPECT_EQ(r->at("seq"), 0);
  EXPECT_EQ(r->at("session"), "session-1");
  EXPECT_EQ(r->at("schema"), kReceiptSchema);
  EXPECT_EQ(r->at("kind"), "action");
  EXPECT_TRUE(verify_chain(path).has_value());
}

TEST(ReceiptLog, NonObjectBodyIsRecordedAsAnEmptyBody) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  auto log = ReceiptLog::create(path, "session-1");
  ASSERT_TRUE(log.has_value()) << log.error().message;
  auto r = log->append("action", Json::array({1, 2}));
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_TRUE(r->is_object());
  EXPECT_EQ(r->at("kind"), "action");
  EXPECT_TRUE(verify_chain(path).has_value());
}

// ---------------------------------------------------------------- tampering

TEST(ReceiptChain, EditingABodyByteBreaksTheChainAtTheNextLine) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  auto lines = lines_of(write_log(path, 4));
  ASSERT_EQ(lines.size(), 4u);
  const std::string original_hash = sha256_hex(lines[1]);
  // Line 2 (1-based) says "receipt number 1"; make it say 7. It still parses as a receipt.
  size_t at = lines[1].find("receipt number 1");
  ASSERT_NE(at, std::string::npos);
  lines[1][at + std::string("receipt number ").size()] = '7';
  write_text(path, join_lines(lines));

  auto r = verify_chain(path);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::LedgerCorrupt);
  EXPECT_EQ(broken_line(r), 3u) << r.error().message;
  EXPECT_EQ(r.error().facts.at("expected_prev"), sha256_hex(lines[1]));
  EXPECT_EQ(r.error().facts.at("found_prev"), original_hash);
}

TEST(ReceiptChain, EditingAnyByteOfAMiddleLineIsDetected) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  const std::string text = write_log(path, 4);
  const auto lines = lines_of(text);
  ASSERT_EQ(lines.size(), 4u);
  const Json original = Json::parse(lines[1]);

  for (size_t i = 0; i < lines[1].size(); ++i) {
    auto edited = lines;
    // Flipping the low bit always changes the byte; canonical JSON holds no '\v', so the
    // edit never makes a new line.
    edited[1][i] = static_cast<char>(edited[1][i] ^ 0x01);
    ASSERT_NE(edited[1][i], '\n');
    write_text(path, join_lines(edited));

    // If the edited line still reads as a receipt with its own prev and seq, only its hash
    // changed, so the break shows at the NEXT line (3). Otherwise the line itself (2) is bad.
    Json parsed = Json::parse(edited[1], nullptr, /*allow_exceptions=*/false);
    bool still_same_link = parsed.is_object() && parsed.contains("prev") && parsed.contains("seq") &&
                           parsed["prev"] == original["prev"] && parsed["seq"] == original["seq"];
    const uint64_t expected_line = still_same_link ? 3 : 2;

    auto r = verify_chain(path);
    ASSERT_FALSE(r.has_value()) << "edit at byte " << i << " went unnoticed: " << edited[1];
    EXPECT_EQ(r.error().code, Code::LedgerCorrupt) << "byte " << i;
    EXPECT_EQ(broken_line(r), expected_line) << "byte " << i << ": " << r.error().message;
  }
}

TEST(ReceiptChain, DeletingAMiddleLineIsDetected) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  auto lines = lines_of(write_log(path, 4));
  lines.erase(lines.begin() + 1);
  write_text(path, join_lines(lines));
  auto r = verify_chain(path);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::LedgerCorrupt);
  EXPECT_EQ(broken_line(r), 2u) << r.error().message;  // old line 3, whose prev named the deleted one
}

TEST(ReceiptChain, DeletingTheFirstLineIsDetected) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  auto lines = lines_of(write_log(path, 3));
  lines.erase(lines.begin());
  write_text(path, join_lines(lines));
  auto r = verify_chain(path);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::LedgerCorrupt);
  EXPECT_EQ(broken_line(r), 1u) << r.error().message;  // its prev is not the genesis hash
  EXPECT_EQ(r.error().facts.at("expected_prev"), kGenesis);
}

TEST(ReceiptChain, ReorderingLinesIsDetected) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  auto lines = lines_of(write_log(path, 4));
  std::swap(lines[1], lines[2]);
  write_text(path, join_lines(lines));
  auto r = verify_chain(path);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::LedgerCorrupt);
  EXPECT_EQ(broken_line(r), 2u) << r.error().message;
}

TEST(ReceiptChain, DeletingTheLastLineShowsOnlyInTheCountAndLastHash) {
  // A hash chain cannot see a clean cut at its tail: whoever holds the count or the last hash
  // (the session, a later receipt elsewhere) must compare. verify_chain reports both for that.
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  auto lines = lines_of(write_log(path, 4));
  const std::string full_last_hash = sha256_hex(lines.back());
  lines.pop_back();
  write_text(path, join_lines(lines));
  auto r = verify_chain(path);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->receipts, 3u);
  EXPECT_NE(r->last_hash, full_last_hash);
}

TEST(ReceiptChain, TornLastLineIsDetected) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  std::string text = write_log(path, 3);
  ASSERT_EQ(text.back(), '\n');

  // The whole line is there but its newline is not: the write did not finish.
  write_text(path, text.substr(0, text.size() - 1));
  auto r = verify_chain(path);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::LedgerCorrupt);
  EXPECT_EQ(broken_line(r), 3u) << r.error().message;

  // Half a line.
  write_text(path, text.substr(0, text.size() - 40));
  auto half = verify_chain(path);
  ASSERT_FALSE(half.has_value());
  EXPECT_EQ(half.error().code, Code::LedgerCorrupt);
  EXPECT_EQ(broken_line(half), 3u) << half.error().message;
}

TEST(ReceiptChain, ALineThatIsNotAReceiptIsDetected) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  auto lines = lines_of(write_log(path, 2));
  lines.insert(lines.begin() + 1, "{\"hello\":\"world\"}");
  write_text(path, join_lines(lines));
  auto r = verify_chain(path);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::LedgerCorrupt);
  EXPECT_EQ(broken_line(r), 2u) << r.error().message;
}

// ---------------------------------------------------------------- creating the file

TEST(ReceiptLogCreate, RefusesAnExistingFileAndLeavesItAlone) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  const std::string other_session = write_log(path, 2);

  auto again = ReceiptLog::create(path, "session-2");
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, Code::LedgerWriteFailed);
  EXPECT_EQ(again.error().facts.at("errno_name"), "EEXIST");
  EXPECT_EQ(read_text(path), other_session);
  EXPECT_TRUE(verify_chain(path).has_value());
}

TEST(ReceiptLogCreate, RefusesAnEmptyExistingFile) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  write_text(path, "");
  auto log = ReceiptLog::create(path, "session-1");
  ASSERT_FALSE(log.has_value());
  EXPECT_EQ(log.error().code, Code::LedgerWriteFailed);
}

TEST(ReceiptLogCreate, RefusesASymlinkAndCreatesNothingThroughIt) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  const std::string target = dir.file("elsewhere.jsonl");
  ASSERT_EQ(::symlink(target.c_str(), path.c_str()), 0);
  auto log = ReceiptLog::create(path, "session-1");
  ASSERT_FALSE(log.has_value());
  EXPECT_EQ(log.error().code, Code::LedgerWriteFailed);
  EXPECT_FALSE(fs::exists(fs::symlink_status(target)));
}

TEST(ReceiptLogCreate, RefusesAMissingDirectory) {
  TempDir dir;
  auto log = ReceiptLog::create(dir.file("no/such/dir/receipts.jsonl"), "session-1");
  ASSERT_FALSE(log.has_value());
  EXPECT_EQ(log.error().code, Code::LedgerWriteFailed);
}

TEST(ReceiptLogCreate, FileIsReadableAndWritableByItsOwnerOnly) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  auto log = ReceiptLog::create(path, "session-1");
  ASSERT_TRUE(log.has_value()) << log.error().message;
  ASSERT_TRUE(log->append("action", Json::object()).has_value());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u) << std::oct << (st.st_mode & 07777);
}

TEST(ReceiptTime, IsRfc3339UtcWithMicroseconds) {
  const std::string ts = now_rfc3339();
  ASSERT_EQ(ts.size(), std::string("2026-01-02T03:04:05.123456Z").size()) << ts;
  EXPECT_EQ(ts[4], '-');
  EXPECT_EQ(ts[10], 'T');
  EXPECT_EQ(ts[19], '.');
  EXPECT_EQ(ts.back(), 'Z');
}

// ---------------------------------------------------------------- the torn-tail rule

// A log cut at every byte (a write cut short anywhere: a full disk, power lost) either verifies
// as it stands (cut at a line's end) or is repaired into one that verifies, every byte kept.
TEST(ReceiptRepair, ALogCutAtEveryByteVerifiesOrIsRepairedKeepingEveryByte) {
  TempDir dir;
  const std::string path = dir.file("session-1.jsonl");
  const std::string text = write_log(path, 4);
  std::vector<size_t> ends;  // offsets just past each newline
  for (size_t i = 0; i < text.size(); ++i)
    if (text[i] == '\n') ends.push_back(i + 1);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    SCOPED_TRACE(cut);
    const std::string prefix = text.substr(0, cut);
    write_text(path, prefix);
    size_t whole = static_cast<size_t>(std::count(prefix.begin(), prefix.end(), '\n'));
    size_t tail_at = whole == 0 ? 0 : ends[whole - 1];
    auto check = verify_chain(path);
    if (tail_at == cut) {
      ASSERT_TRUE(check.has_value()) << check.error().message;
      EXPECT_EQ(check->receipts, whole);
      auto rep = repair_torn_tail(path);
      ASSERT_TRUE(rep.has_value()) << rep.error().message;
      EXPECT_FALSE(rep->terminated || rep->quarantined);
      EXPECT_EQ(read_text(path), prefix);  // nothing to repair, nothing written
      continue;
    }
    ASSERT_FALSE(check.has_value());
    EXPECT_EQ(check.error().code, Code::LedgerCorrupt);
    EXPECT_EQ(check.error().facts.at("receipts"), whole);
    EXPECT_EQ(check.error().facts.at("torn_tail").at("offset"), tail_at);
    EXPECT_EQ(check.error().facts.at("torn_tail").at("length"), cut - tail_at);
    EXPECT_NE(check.error().message.find("airlock receipts repair"), std::string::npos);

    auto rep = repair_torn_tail(path);
    ASSERT_TRUE(rep.has_value()) << rep.error().message;
    EXPECT_EQ(rep->receipts, whole + 1);
    auto after = verify_chain(path);
    ASSERT_TRUE(after.has_value()) << after.error().message;
    EXPECT_EQ(after->receipts, whole + 1);
    const std::string repaired = read_text(path);
    EXPECT_EQ(repaired.substr(0, tail_at), prefix.substr(0, tail_at));  // the receipts before, untouched
    if (cut + 1 == ends[whole]) {
      // The whole receipt was written, only its newline was not.
      EXPECT_TRUE(rep->terminated);
      EXPECT_EQ(repaired, text.substr(0, cut + 1));
    } else {
      EXPECT_TRUE(rep->quarantined);
      Json torn = Json::parse(lines_of(repaired).back());
      EXPECT_EQ(torn.at("kind"), "receipts.torn_tail");
      EXPECT_EQ(torn.at("session"), "session-1");
      EXPECT_EQ(torn.at("seq"), whole);
      EXPECT_EQ(torn.at("offset"), tail_at);
      EXPECT_EQ(torn.at("length"), cut - tail_at);
      EXPECT_EQ(base64_decode(torn.at("bytes_b64").get<std::string>()), prefix.substr(tail_at));
      EXPECT_EQ(torn.at("sha256"), sha256_hex(prefix.substr(tail_at)));
    }
  }
}

TEST(ReceiptRepair, ALogItsSessionStillWritesIsNotTouched) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  auto log = ReceiptLog::create(path, "session-1");
  ASSERT_TRUE(log.has_value()) << log.error().message;
  ASSERT_TRUE(log->append("step", Json{{"n", 0}}).has_value());
  const std::string before = read_text(path);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(before.size() - 5)), 0);
  auto rep = repair_torn_tail(path);
  ASSERT_FALSE(rep.has_value());
  EXPECT_EQ(rep.error().code, Code::LedgerWriteFailed);
  EXPECT_NE(rep.error().message.find("still writing"), std::string::npos) << rep.error().message;
  EXPECT_EQ(read_text(path), before.substr(0, before.size() - 5));
}

TEST(ReceiptRepair, ABrokenChainIsRefusedAndNothingWritten) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  std::string text = write_log(path, 3);
  auto lines = lines_of(text);
  lines[1][lines[1].size() / 2] ^= 1;
  std::string broken = join_lines(lines) + "{\"torn";
  write_text(path, broken);
  auto rep = repair_torn_tail(path);
  ASSERT_FALSE(rep.has_value());
  EXPECT_EQ(rep.error().code, Code::LedgerCorrupt);
  EXPECT_EQ(read_text(path), broken);
}

TEST(ReceiptRepair, ALogNamedWithBytesThatAreNotUtf8IsRepairedToo) {
  TempDir dir;
  const std::string path = dir.file("s\xff\xfe.jsonl");  // no whole receipt: the session comes from the name
  write_text(path, "{\"torn");
  auto rep = repair_torn_tail(path);
  ASSERT_TRUE(rep.has_value()) << rep.error().message;
  EXPECT_TRUE(rep->quarantined);
  auto after = verify_chain(path);
  ASSERT_TRUE(after.has_value()) << after.error().message;
  EXPECT_EQ(Json::parse(lines_of(read_text(path)).back()).at("session"), "unknown");
}

// ---------------------------------------------------------------- reading on from a cursor

// Reading a log on from each page's cursor, a few bytes at a time, gives every receipt once, in
// order, each verified, ending where verify_chain ends; a line longer than a page is read whole.
TEST(ReadChain, PagesFromACursorGiveEveryReceiptOnceVerified) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  std::string text = write_log(path, 7);
  auto whole = verify_chain(path);
  ASSERT_TRUE(whole.has_value());
  for (uint64_t page_bytes : {uint64_t{1}, uint64_t{100}, uint64_t{450}, uint64_t{1} << 20}) {
    ChainCursor at;
    std::vector<uint64_t> seqs, offsets;
    for (int pages = 0; pages < 100; ++pages) {
      auto p = read_chain(path, at, page_bytes);
      ASSERT_TRUE(p.has_value()) << p.error().message;
      ASSERT_FALSE(p->broken.has_value());
      ASSERT_EQ(p->receipts.size(), p->offsets.size());
      for (size_t i = 0; i < p->receipts.size(); ++i) {
        seqs.push_back(p->receipts[i]["seq"].get<uint64_t>());
        offsets.push_back(p->offsets[i]);
      }
      at = p->next;
      if (!p->more) break;
    }
    EXPECT_EQ(seqs, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6})) << page_bytes;
    EXPECT_EQ(at.offset, text.size());
    EXPECT_EQ(at.receipts, 7u);
    EXPECT_EQ(at.last_hash, whole->last_hash);
    for (size_t i = 0; i < offsets.size(); ++i)
      EXPECT_TRUE(offsets[i] == 0 || text[offsets[i] - 1] == '\n') << offsets[i];
    // The lines between two offsets, read again, are the same receipts.
    auto again = read_lines(path, offsets[2], at.offset, 1u << 20);
    ASSERT_TRUE(again.has_value());
    ASSERT_EQ(again->receipts.size(), 5u);
    EXPECT_EQ(again->receipts[0]["seq"], 2);
    EXPECT_EQ(again->sha256[0], sha256_hex(lines_of(text)[2]));
    EXPECT_EQ(again->next.offset, at.offset);
  }
}

// A line still being written is left for the next read; appended later, it is read and verified.
TEST(ReadChain, ALineWithoutItsNewlineIsLeftForTheNextRead) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  std::string text = write_log(path, 3);
  auto lines = lines_of(text);
  write_text(path, lines[0] + "\n" + lines[1] + "\n" + lines[2]);  // the third cut before its newline
  auto p = read_chain(path, {}, 1u << 20);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->receipts.size(), 2u);
  EXPECT_FALSE(p->broken.has_value());
  write_text(path, text);
  auto rest = read_chain(path, p->next, 1u << 20);
  ASSERT_TRUE(rest.has_value());
  ASSERT_EQ(rest->receipts.size(), 1u);
  EXPECT_EQ(rest->receipts[0]["seq"], 2);
  EXPECT_EQ(rest->next.offset, text.size());
}

// A line that does not chain on ends the page before it, with the break named; a cursor past
// the file's end (a log replaced by a shorter one) is refused.
TEST(ReadChain, ABreakEndsThePageAndAShorterFileIsRefused) {
  TempDir dir;
  const std::string path = dir.file("receipts.jsonl");
  auto lines = lines_of(write_log(path, 4));
  auto first = read_chain(path, {}, 1u << 20);
  ASSERT_TRUE(first.has_value());
  size_t at = lines[1].find("receipt number 1");
  lines[1][at + std::string("receipt number ").size()] = '7';
  write_text(path, join_lines(lines));
  auto p = read_chain(path, {}, 1u << 20);
  ASSERT_TRUE(p.has_value());
  ASSERT_TRUE(p->broken.has_value());
  EXPECT_EQ(p->broken->code, Code::LedgerCorrupt);
  EXPECT_EQ(p->broken->facts.value("line", 0), 3);
  EXPECT_EQ(p->receipts.size(), 2u);
  EXPECT_FALSE(p->more);
  // Read on from the first read's end: nothing new, and a cursor past the end is refused.
  write_text(path, lines[0] + "\n");
  auto past = read_chain(path, first->next, 1u << 20);
  ASSERT_FALSE(past.has_value());
  EXPECT_EQ(past.error().code, Code::LedgerCorrupt);
}

}  // namespace
}  // namespace airlock::ledger
