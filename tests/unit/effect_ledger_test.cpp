// The effect ledger on real files: two-phase records, orphans, the single-record form, the torn
// tail repair (exclusive between real processes), and the strict and tolerant scans.
#include "ledger/effect_ledger.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "base/encoding.h"
#include "base/fs.h"
#include "base/hash.h"

namespace airlock::ledger {
namespace {

class EffectLedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (std::filesystem::temp_directory_path() / "airlock-ledger-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    path_ = dir_ + "/effects.jsonl";
  }
  void TearDown() override { (void)remove_tree(dir_); }

  static EffectIntent intent(const std::string& attempt, const std::string& key = "ik2-k") {
    return {attempt, key, "pay", sha256_hex("{}"), "run-1", "span-1", "/w/" + attempt, 1700000000000};
  }
  static EffectOutcome outcome(const std::string& attempt, bool ok, const std::string& key = "ik2-k") {
    EffectOutcome o{attempt, key, ok, std::nullopt, 1700000000500, 500};
    if (!ok) o.error = Error{Code::ToolFailed, "exit 3", {}};
    return o;
  }
  void append_raw(std::string_view bytes) {
    std::ofstream(path_, std::ios::app | std::ios::binary) << bytes;
  }
  std::string text() { return read_file(path_).value_or(""); }
  LedgerScan scan_ok(bool tolerant = false) {
    auto s = scan_ledger(path_, tolerant);
    EXPECT_TRUE(s) << s.error().message << " " << s.error().facts.dump();
    return s.value_or(LedgerScan{});
  }

  std::string dir_, path_;
};

TEST_F(EffectLedgerTest, AnIntentAndItsOutcomeMakeARow) {
  auto led = EffectLedger::open(path_);
  ASSERT_TRUE(led) << led.error().message;
  ASSERT_TRUE(led->append_intent(intent("a1")));
  ASSERT_TRUE(led->append_outcome(outcome("a1", false)));
  auto s = scan_ok();
  ASSERT_EQ(s.rows.size(), 1u);
  EXPECT_TRUE(s.orphans.empty());
  EXPECT_EQ(s.rows[0].intent.workdir, "/w/a1");
  EXPECT_FALSE(s.rows[0].outcome.ok);
  ASSERT_TRUE(s.rows[0].outcome.error);
  EXPECT_EQ(s.rows[0].outcome.error->code, Code::ToolFailed);
  EXPECT_EQ(s.rows[0].line, 1u);
  EXPECT_EQ(s.rows[0].outcome_line, 2u);
  EXPECT_EQ(s.lines, 2u);
}

// The design's rule: rows written without an attempt id pair by (idempotency key, start time).
TEST_F(EffectLedgerTest, LegacyRowsWithoutAnAttemptIdPairByKeyAndStartTime) {
  std::string in = R"({"phase":"intent","key":"ik1-a","tool":"pay","args_hash":"h","run_id":"r","span":"s",)"
                   R"("workdir":"/w","started_at":100})";
  append_raw(in + "\n");
  append_raw(R"({"phase":"intent","key":"ik1-a","tool":"pay","args_hash":"h","run_id":"r","span":"s",)"
             R"("workdir":"/w2","started_at":200})" "\n");
  // The outcome of the second start; the first stays an orphan.
  append_raw(R"({"phase":"outcome","key":"ik1-a","started_at":200,"status":"ok","error":null,)"
             R"("finished_at":250,"wall_ms":50})" "\n");
  append_raw(R"({"phase":"single","key":"ik1-b","tool":"pay","args_hash":"h","run_id":"r","span":"s",)"
             R"("workdir":"/w3","started_at":300,"status":"ok","error":null,"finished_at":310,"wall_ms":10})" "\n");
  auto s = scan_ok();
  EXPECT_TRUE(s.corrupt.empty()) << s.corrupt.size();
  ASSERT_EQ(s.rows.size(), 2u);
  EXPECT_EQ(s.rows[0].intent.workdir, "/w2");
  EXPECT_EQ(s.rows[0].outcome.key, "ik1-a");
  EXPECT_TRUE(s.rows[1].single);
  ASSERT_EQ(s.orphans.size(), 1u);
  EXPECT_EQ(s.orphans[0].intent.workdir, "/w");
  // An outcome whose (key, start) no intent has is not paired with a guess.
  append_raw(R"({"phase":"outcome","key":"ik1-a","started_at":999,"status":"ok","error":null,)"
             R"("finished_at":1000,"wall_ms":1})" "\n");
  auto tolerant = scan_ledger(path_, true);
  ASSERT_TRUE(tolerant);
  ASSERT_EQ(tolerant->corrupt.size(), 1u);
  EXPECT_NE(tolerant->corrupt[0].reason.find("no intent"), std::string::npos) << tolerant->corrupt[0].reason;
  EXPECT_EQ(tolerant->rows.size(), 2u);
}

TEST_F(EffectLedgerTest, ASiblingAttemptsOutcomeNeverClearsAnOrphan) {
  auto led = EffectLedger::open(path_);
  ASSERT_TRUE(led);
  // Two attempts of one key (a retry): only the second has an outcome.
  ASSERT_TRUE(led->append_intent(intent("first")));
  ASSERT_TRUE(led->append_intent(intent("second")));
  ASSERT_TRUE(led->append_outcome(outcome("second", true)));
  auto s = scan_ok();
  ASSERT_EQ(s.rows.size(), 1u);
  EXPECT_EQ(s.rows[0].intent.attempt_id, "second");
  ASSERT_EQ(s.orphans.size(), 1u);
  EXPECT_EQ(s.orphans[0].intent.attempt_id, "first");
  EXPECT_EQ(s.orphans[0].intent.key, "ik2-k");
  EXPECT_EQ(s.orphans[0].intent.workdir, "/w/first");
  EXPECT_EQ(s.orphans[0].line, 1u);
  EXPECT_EQ(s.orphans[0].offset, 0u);
}

TEST_F(EffectLedgerTest, ALedgerWithoutIntentsKeepsTheSingleRecordForm) {
  auto led = EffectLedger::open(path_, {.intents = false});
  ASSERT_TRUE(led);
  auto refused = led->append_intent(intent("a1"));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Code::LedgerWriteFailed);
  ASSERT_TRUE(led->append_single(intent("a1"), outcome("a1", true)));
  EXPECT_EQ(text().find("\"phase\":\"intent\""), std::string::npos);
  auto s = scan_ok();
  ASSERT_EQ(s.rows.size(), 1u);
  EXPECT_TRUE(s.rows[0].single);
  EXPECT_TRUE(s.rows[0].outcome.ok);
}

TEST_F(EffectLedgerTest, AFailedIntentWriteIsRefusedAndEndsTheWriter) {
  // A ledger on a full disk: every write fails with ENOSPC.
  std::string full = dir_ + "/full";
  ASSERT_EQ(::symlink("/dev/full", full.c_str()), 0);
  auto led = EffectLedger::open(full, {.fsync = false});
  ASSERT_TRUE(led) << led.error().message;
  auto r = led->append_intent(intent("a1"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::LedgerWriteFailed);
  auto again = led->append_outcome(outcome("a1", true));
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Code::LedgerWriteFailed);
}

TEST_F(EffectLedgerTest, FsyncModeWritesTheSameRecords) {
  auto led = EffectLedger::open(path_, {.intents = true, .fsync = true});
  ASSERT_TRUE(led);
  ASSERT_TRUE(led->append_intent(intent("a1")));
  ASSERT_TRUE(led->append_outcome(outcome("a1", true)));
  EXPECT_EQ(scan_ok().rows.size(), 1u);
}

TEST_F(EffectLedgerTest, ACompleteRecordMissingOnlyItsNewlineIsTerminated) {
  std::string rec = canonical_json(intent_record(intent("a1")));
  append_raw(rec);  // a crash right before the newline
  auto before = scan_ok();
  ASSERT_TRUE(before.tail);
  EXPECT_TRUE(before.tail->complete_record);
  EXPECT_EQ(before.tail->offset, 0u);
  auto led = EffectLedger::open(path_);
  ASSERT_TRUE(led);
  EXPECT_TRUE(led->repair().terminated);
  EXPECT_FALSE(led->repair().quarantined);
  EXPECT_EQ(text(), rec + "\n");
  ASSERT_TRUE(led->append_outcome(outcome("a1", true)));
  auto s = scan_ok();
  EXPECT_EQ(s.rows.size(), 1u);
  EXPECT_FALSE(s.tail);
}

TEST_F(EffectLedgerTest, AnUnparseableFragmentIsCutAndQuarantinedWithItsExactBytes) {
  std::string good = canonical_json(intent_record(intent("a1"))) + "\n";
  std::string fragment = canonical_json(outcome_record(outcome("a1", true))).substr(0, 40);
  append_raw(good + fragment);
  auto led = EffectLedger::open(path_);
  ASSERT_TRUE(led);
  ASSERT_TRUE(led->repair().quarantined);
  const auto& t = *led->repair().quarantined;
  EXPECT_EQ(t.offset, good.size());
  EXPECT_EQ(t.length, fragment.size());
  EXPECT_EQ(t.sha256, sha256_hex(fragment));
  EXPECT_EQ(t.bytes_b64, base64_encode(fragment));
  ASSERT_TRUE(led->append_outcome(outcome("a1", true)));
  auto s = scan_ok();
  ASSERT_EQ(s.torn.size(), 1u);
  EXPECT_EQ(s.torn[0].line, 2u);
  EXPECT_EQ(s.torn[0].sha256, sha256_hex(fragment));
  EXPECT_EQ(s.rows.size(), 1u);
  EXPECT_TRUE(s.orphans.empty());
  EXPECT_EQ(text().find(fragment + "\n"), std::string::npos);  // the fragment itself is gone
}

TEST_F(EffectLedgerTest, ParseableIsDecidedOnTheBytesStrictUtf8First) {
  // Valid JSON text but for one invalid UTF-8 byte in a string: torn, not terminated.
  std::string rec = canonical_json(intent_record(intent("a1")));
  rec.replace(rec.find("pay"), 3, "p\xff" "y");
  append_raw(rec);
  auto led = EffectLedger::open(path_);
  ASSERT_TRUE(led);
  EXPECT_FALSE(led->repair().terminated);
  ASSERT_TRUE(led->repair().quarantined);
  EXPECT_EQ(led->repair().quarantined->sha256, sha256_hex(rec));
  // An overlong encoding and a surrogate are not UTF-8 either.
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));
  EXPECT_TRUE(is_valid_utf8("h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
}

TEST_F(EffectLedgerTest, AStaleRepairLockIsStolenAndAFreshOneWaitedFor) {
  append_raw("{\"phase\":");
  std::string lock = path_ + ".repair-lock";
  ASSERT_TRUE(write_file_atomic(lock, "99999\n"));
  timespec old[2] = {{::time(nullptr) - 11, 0}, {::time(nullptr) - 11, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, lock.c_str(), old, 0), 0);
  auto led = EffectLedger::open(path_);
  ASSERT_TRUE(led) << led.error().message;
  EXPECT_TRUE(led->repair().stole_stale_lock);
  EXPECT_TRUE(led->repair().quarantined);
  EXPECT_FALSE(std::filesystem::exists(lock));

  // A fresh lock is waited for, not stolen.
  ASSERT_TRUE(write_file_atomic(lock, "1\n"));
  std::thread holder([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ::unlink(lock.c_str());
  });
  auto second = EffectLedger::open(path_);
  holder.join();
  ASSERT_TRUE(second);
  EXPECT_FALSE(second->repair().stole_stale_lock);
  EXPECT_FALSE(second->repair().quarantined);  // the first writer repaired already
}

TEST_F(EffectLedgerTest, RepairIsExclusiveBetweenProcesses) {
  append_raw(canonical_json(intent_record(intent("a1"))) + "\n" + "{\"phase\":\"outc");
  // Eight real processes open the ledger at once; the one torn tail is quarantined once.
  std::vector<pid_t> kids;
  for (int i = 0; i < 8; ++i) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto led = EffectLedger::open(path_);
      ::_exit(led ? 0 : 1);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  auto s = scan_ok();
  EXPECT_EQ(s.torn.size(), 1u);
  EXPECT_EQ(s.orphans.size(), 1u);
  EXPECT_FALSE(s.tail);
  EXPECT_FALSE(std::filesystem::exists(path_ + ".repair-lock"));
}

struct CorruptCase {
  const char* name;
  std::string line;
  std::string reason;
};

TEST_F(EffectLedgerTest, AnythingUndecodableFailsTheScanWithLineOffsetAndHash) {
  std::string good = canonical_json(intent_record(intent("a1"))) + "\n";
  Json missing = intent_record(intent("a2"));
  missing.erase("workdir");
  Json mistyped = intent_record(intent("a3"));
  mistyped["started_at"] = "yesterday";
  Json unknown_field = intent_record(intent("a4"));
  unknown_field["note"] = 1;
  std::vector<CorruptCase> cases = {
      {"interior non-JSON", "not json at all", "not JSON"},
      {"invalid UTF-8", "{\"phase\":\"intent\xff\"}", "not valid UTF-8"},
      {"not an object", "[1,2,3]", "not a JSON object"},
      {"missing field", canonical_json(missing), "missing field \"workdir\""},
      {"mistyped field", canonical_json(mistyped), "field \"started_at\" is not an integer"},
      {"unknown field", canonical_json(unknown_field), "unknown field \"note\""},
      {"unknown phase", R"({"phase":"maybe"})", "unknown phase \"maybe\""},
      {"outcome without intent", canonical_json(outcome_record(outcome("zz", true))), "has no intent"},
      {"a second intent", good.substr(0, good.size() - 1), "a second intent"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::string bytes = good + c.line + "\n" + good.substr(0, 0);
    auto strict = scan_ledger_bytes(bytes);
    ASSERT_FALSE(strict);
    EXPECT_EQ(strict.error().code, Code::LedgerCorrupt);
    const Json& p = strict.error().facts["problems"][0];
    EXPECT_EQ(p["line"], 2);
    EXPECT_EQ(p["offset"], good.size());
    EXPECT_EQ(p["length"], c.line.size());
    EXPECT_EQ(p["sha256"], sha256_hex(c.line));
    EXPECT_NE(p["reason"].get<std::string>().find(c.reason), std::string::npos) << p["reason"];
    auto tolerant = scan_ledger_bytes(bytes, true);
    ASSERT_TRUE(tolerant);
    ASSERT_EQ(tolerant->corrupt.size(), 1u);
    EXPECT_EQ(tolerant->corrupt[0].line, 2u);
    EXPECT_EQ(tolerant->corrupt[0].sha256, sha256_hex(c.line));
    EXPECT_EQ(tolerant->orphans.size(), 1u);  // the good intent is still read
  }
}

TEST_F(EffectLedgerTest, ALiveUnterminatedTailIsReportedNotJudged) {
  std::string good = canonical_json(intent_record(intent("a1"))) + "\n";
  auto s = scan_ledger_bytes(good + "{\"phase\":\"outco");
  ASSERT_TRUE(s) << s.error().message;
  ASSERT_TRUE(s->tail);
  EXPECT_EQ(s->tail->offset, good.size());
  EXPECT_FALSE(s->tail->complete_record);
  EXPECT_EQ(s->tail->sha256, sha256_hex("{\"phase\":\"outco"));
}

}  // namespace
}  // namespace airlock::ledger
