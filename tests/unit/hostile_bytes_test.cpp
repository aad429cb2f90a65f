// Hostile bytes (issue 26): deep, huge, duplicate-keyed, overflowing and non-UTF-8 input is refused
// with a code or recorded losslessly, never a crash or a lost receipt.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "scratch_dir.h"
#include "base/encoding.h"
#include "base/fs.h"
#include "base/json_util.h"
#include "exec/tool_program.h"
#include "ledger/effect_ledger.h"
#include "ledger/receipts.h"
#include "policy/task_policy.h"

namespace airlock {
namespace {

std::string nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

using TempDir = airlock::testing::ScratchDir;

// ---- parse_json: the one parser of untrusted JSON ---------------------------------------------

TEST(ParseJson, DeepNestingIsRefusedWithItsPathNotAStackOverflow) {
  auto r = parse_json(std::string(200000, '['), Code::ProtocolError, "the request");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::ProtocolError);
  EXPECT_EQ(r.error().facts["max_depth"], kMaxJsonDepth);
  EXPECT_TRUE(r.error().facts["path"].get<std::string>().starts_with("$[0][0]"));
}

TEST(ParseJson, NestingUpToTheLimitIsAccepted) {
  auto ok = parse_json(nested(kMaxJsonDepth), Code::ProtocolError, "x");
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_FALSE(ok->dump().empty());
  auto deep = parse_json(nested(kMaxJsonDepth + 1), Code::ProtocolError, "x");
  ASSERT_FALSE(deep);
  EXPECT_EQ(
      deep.error().facts["path"], "$" + [] {
        std::string p;
        for (size_t i = 0; i < kMaxJsonDepth; ++i) p += "[0]";
        return p;
      }());
}

TEST(ParseJson, NumberOverflowIsATypedErrorNotAnException) {
  for (const char* text : {"1e400", "[1, -1e400]", R"({"limits": {"memory_mb": 1e400}})"}) {
    auto r = parse_json(text, Code::PolicyInvalid, "x");
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.error().code, Code::PolicyInvalid) << text;
    EXPECT_NE(r.error().message.find("too large"), std::string::npos) << r.error().message;
  }
}

TEST(ParseJson, DuplicateKeysAreRefusedWithTheirPath) {
  auto r = parse_json(R"({"a": [0, {"b": 1, "b": 2}]})", Code::ProtocolError, "x");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().facts["path"], "$.a[1].b");
  auto allowed = parse_json(R"({"b": 1, "b": 2})", Code::ProtocolError, "x", {.allow_duplicate_keys = true});
  ASSERT_TRUE(allowed);
  EXPECT_EQ((*allowed)["b"], 2);
}

TEST(ParseJson, TextLargerThanTheLimitIsRefusedBeforeParsing) {
  auto r = parse_json(std::string(100, ' ') + "1", Code::ProtocolError, "x", {.max_bytes = 64});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().facts["max_bytes"], 64);
}

TEST(ParseJson, NonUtf8InputIsRefusedWithAMessageThatIsUtf8) {
  for (std::string text : {std::string("\xff"), std::string("\"\xff\""), std::string("{\"\xc0\xaf\": 1}")}) {
    auto r = parse_json(text, Code::ProtocolError, "the request");
    ASSERT_FALSE(r);
    EXPECT_TRUE(is_valid_utf8(r.error().message)) << r.error().message;
    EXPECT_NO_THROW((void)canonical_json(r.error().to_json()));
  }
}

// ---- lossless repair ---------------------------------------------------------------------------

TEST(RepairUtf8, KeepsValidUtf8AndRecordsExactBytesBesideALossyString) {
  Json j = {{"ok", "caf\xc3\xa9"},
            {"path",
             "dir/\xff"
             "x"},
            {"list", Json::array({"a", std::string("\x80")})}};
  Json exact = repair_utf8(j);
  EXPECT_EQ(j["ok"], "caf\xc3\xa9");
  EXPECT_EQ(j["path"], "dir/\xef\xbf\xbdx");
  EXPECT_EQ(j["list"][1], "\xef\xbf\xbd");
  ASSERT_EQ(exact.size(), 2u);
  for (const Json& e : exact) {
    auto bytes = base64_decode(e["base64"].get<std::string>());
    ASSERT_TRUE(bytes);
    if (e["pointer"] == "/path")
      EXPECT_EQ(*bytes,
                "dir/\xff"
                "x");
    else
      EXPECT_EQ(e["pointer"], "/list/1");
  }
  EXPECT_NO_THROW((void)canonical_json(j));
  Json clean = {{"a", 1}};
  EXPECT_TRUE(repair_utf8(clean).empty());
}

TEST(RepairUtf8, RepairsKeysAndKeepsCollidingKeysApart) {
  Json j = Json::object();
  j["\xff"] = 1;
  j["\xfe"] = 2;
  Json exact = repair_utf8(j);
  EXPECT_EQ(j.size(), 2u);
  ASSERT_EQ(exact.size(), 2u);
  for (const Json& e : exact) EXPECT_TRUE(e["key"].get<bool>());
  EXPECT_NO_THROW((void)canonical_json(j));
}

TEST(RepairUtf8, CutsNestingDeeperThanARecordMayHave) {
  Json j = Json::array();
  Json* p = &j;
  for (size_t i = 0; i < kMaxRecordDepth + 10; ++i) {
    p->push_back(Json::array());
    p = &p->back();
  }
  Json exact = repair_utf8(j);
  ASSERT_EQ(exact.size(), 1u);
  EXPECT_TRUE(exact[0].contains("dropped"));
}

// ---- where the bytes arrive --------------------------------------------------------------------

TEST(HostilePolicy, DeepNestingIsPolicyInvalid) {
  auto p = policy::parse_layer_text(std::string(100000, '[') + std::string(100000, ']'),
                                    policy::builtin_default(), "deep.json");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code, Code::PolicyInvalid);
}

TEST(HostilePolicy, NumberOverflowIsPolicyInvalidNotAnInternalError) {
  auto p = policy::parse_layer_text(
      R"({"schema_version": "airlock.task_policy.v1", "limits": {"memory_mb": 1e400}})",
      policy::builtin_default(), "big.json");
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code, Code::PolicyInvalid);
  EXPECT_EQ(p.error().facts["source"], "big.json");
}

TEST(HostileToolOutput, DeepJsonIsAProtocolErrorNotACrashLater) {
  auto r = exec::parse_tool_output(nested(200000));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::ProtocolError);
  EXPECT_NO_THROW((void)canonical_json(r.error().to_json()));
  auto overflow = exec::parse_tool_output("{\"n\": 1e400}");
  ASSERT_FALSE(overflow);
  EXPECT_EQ(overflow.error().code, Code::ProtocolError);
}

TEST(HostileReceipts, ABodyThatIsNotUtf8IsWrittenLosslesslyAndTheChainVerifies) {
  TempDir d;
  auto log = ledger::ReceiptLog::create(d.file("r.jsonl"), "s-1");
  ASSERT_TRUE(log);
  const std::string name = "reports/\xff";
  auto r = log->append("session.close", {{"written_back", {{"written", Json::array({name})}}},
                                         {"error", {{"message", "no such file: " + name}}}});
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_TRUE(log->append("session.after", Json::object()));
  auto chain = ledger::verify_chain(d.file("r.jsonl"));
  ASSERT_TRUE(chain) << chain.error().message;
  EXPECT_EQ(chain->receipts, 2u);
  const Json& exact = (*r)[std::string(ledger::kNotUtf8Key)];
  ASSERT_EQ(exact.size(), 2u);
  bool found = false;
  for (const Json& e : exact)
    if (e["pointer"] == "/written_back/written/0") {
      found = true;
      EXPECT_EQ(base64_decode(e["base64"].get<std::string>()), name);
    }
  EXPECT_TRUE(found) << exact.dump();
}

// A request may be as large as parse_json reads (kMaxJsonBytes); its receipt holds it and more,
// and must still be read back: a sandbox must not be able to make its own chain unverifiable.
TEST(HostileReceipts, AReceiptHoldingTheLargestRequestStillVerifies) {
  TempDir d;
  auto log = ledger::ReceiptLog::create(d.file("r.jsonl"), "s-1");
  ASSERT_TRUE(log);
  Json args = {{"path", std::string(kMaxJsonBytes - 64, 'p')}, {"offset", 0}};
  ASSERT_TRUE(
      log->append("read_file", {{"args", args}, {"decision", "refused"}, {"error", {{"message", "no"}}}}));
  auto chain = ledger::verify_chain(d.file("r.jsonl"));
  ASSERT_TRUE(chain) << chain.error().message;
  EXPECT_EQ(chain->receipts, 1u);
}

TEST(HostileEffectLedger, AnErrorMessageThatIsNotUtf8IsRecordedAndScansBack) {
  TempDir d;
  auto led = ledger::EffectLedger::open(d.file("e.jsonl"));
  ASSERT_TRUE(led);
  EffectIntent i{"a1", "ik2-k", "pay", std::string(64, '0'), "run-1", "span-1", "/w/a1", 1700000000000};
  EffectOutcome o{"a1", "ik2-k", false, Error{Code::ToolFailed, "bad \xff byte", {}}, 1700000000500, 500};
  ASSERT_TRUE(led->append_intent(i));
  auto w = led->append_outcome(o);
  ASSERT_TRUE(w) << w.error().message;
  auto scan = ledger::scan_ledger(d.file("e.jsonl"));
  ASSERT_TRUE(scan) << scan.error().message;
  ASSERT_EQ(scan->rows.size(), 1u);
  EXPECT_EQ(scan->rows[0].outcome.error->message, "bad \xef\xbf\xbd byte");
  auto text = read_file(d.file("e.jsonl"));
  ASSERT_TRUE(text);
  EXPECT_NE(text->find(base64_encode("bad \xff byte")), std::string::npos);
}

TEST(HostileEffectLedger, ADeepRecordIsCorruptNotACrash) {
  auto scan = ledger::scan_ledger_bytes(nested(200000) + "\n", /*tolerant=*/true);
  ASSERT_TRUE(scan) << scan.error().message;
  EXPECT_NO_THROW((void)canonical_json(scan->to_json()));
}

}  // namespace
}  // namespace airlock
