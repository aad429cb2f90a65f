// Idempotency keys: the properties the effect ledger relies on, and the version rule.
#include <gtest/gtest.h>

#include "ledger/idempotency.h"

namespace airlock::ledger {
namespace {

const Json kArgs = Json::parse(R"({"to": "a@example.com", "amount": 5})");

std::string key(const RunKeying& run, uint64_t step, uint32_t ordinal, const Json& args = kArgs,
                const std::string& tool = "pay") {
  auto k = derive_key(run, {step, ordinal}, tool, args);
  EXPECT_TRUE(k) << k.error().message;
  return k.value_or("");
}

TEST(IdempotencyKey, ARerunAfterACrashDerivesTheSameKey) {
  RunKeying run = start_run("run-7");
  std::string before = key(run, 3, 0);
  // The crash: only what was persisted survives; the resume reads it back.
  auto resumed = RunKeying::from_json(Json::parse(run.to_json().dump()));
  ASSERT_TRUE(resumed) << resumed.error().message;
  EXPECT_EQ(key(*resumed, 3, 0), before);
  // Argument key order is not part of the call.
  EXPECT_EQ(key(*resumed, 3, 0, Json::parse(R"({"amount": 5, "to": "a@example.com"})")), before);
}

TEST(IdempotencyKey, TwoIntendedCallsWithIdenticalArgumentsGetDifferentKeys) {
  RunKeying run = start_run("run-7");
  EXPECT_NE(key(run, 3, 0), key(run, 3, 1));  // twice in one step
  EXPECT_NE(key(run, 3, 0), key(run, 4, 0));  // once in each of two steps
}

TEST(IdempotencyKey, ARunDeletedAndRecreatedWithTheSameIdGetsNewKeys) {
  RunKeying first = start_run("run-7");
  RunKeying again = start_run("run-7");
  EXPECT_NE(first.generation, again.generation);
  EXPECT_NE(key(first, 3, 0), key(again, 3, 0));
}

TEST(IdempotencyKey, VersionOneOmitsTheGenerationAndStaysStableForAStartedRun) {
  RunKeying first = start_run("run-7"), again = start_run("run-7");
  first.derivation_version = again.derivation_version = kKeyDerivationV1;
  // Why version 2 exists: under version 1 a recreated run repeats its keys.
  EXPECT_EQ(key(first, 3, 0), key(again, 3, 0));
  EXPECT_TRUE(key(first, 3, 0).starts_with("ik1-"));
  // A run stamped with version 1 keeps it through a resume: its keys never change.
  auto resumed = RunKeying::from_json(first.to_json());
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->derivation_version, kKeyDerivationV1);
  EXPECT_EQ(key(*resumed, 3, 0), key(first, 3, 0));
  EXPECT_NE(key(first, 3, 0), [&] {
    RunKeying v2 = first;
    v2.derivation_version = kKeyDerivationCurrent;
    return key(v2, 3, 0);
  }());
}

TEST(IdempotencyKey, AnUnknownRecordedVersionIsRefusedNeverAFallback) {
  RunKeying run = start_run("run-7");
  run.derivation_version = 3;
  auto k = derive_key(run, {1, 0}, "pay", kArgs);
  ASSERT_FALSE(k);
  EXPECT_EQ(k.error().code, Code::KeyDerivationUnknown);
  Json recorded = run.to_json();
  auto loaded = RunKeying::from_json(recorded);
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().code, Code::KeyDerivationUnknown);
  EXPECT_EQ(loaded.error().facts["key_derivation"], 3);
}

// The design's rule: a run recorded before the derivation stamp derives version-1 keys for its
// whole life, every resume included; only an unknown recorded version is refused.
TEST(IdempotencyKey, ARunRecordedBeforeTheStampDerivesVersionOneKeysForItsWholeLife) {
  auto legacy = RunKeying::from_json(Json::parse(R"({"run_id": "run-old", "generation": "g-old"})"));
  ASSERT_TRUE(legacy) << legacy.error().message;
  EXPECT_EQ(legacy->derivation_version, kKeyDerivationV1);
  auto k = derive_key(*legacy, {1, 0}, "pay", kArgs);
  ASSERT_TRUE(k);
  EXPECT_TRUE(k->starts_with("ik1-")) << *k;
  // Saved again (as a resume does) and loaded again: still version 1, the same key.
  auto resumed = RunKeying::from_json(legacy->to_json());
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->derivation_version, kKeyDerivationV1);
  EXPECT_EQ(*derive_key(*resumed, {1, 0}, "pay", kArgs), *k);
}

TEST(IdempotencyKey, FieldBoundariesCannotBeShifted) {
  RunKeying run = start_run("r");
  EXPECT_NE(key(run, 1, 0, Json("x"), "ab"), key(run, 1, 0, Json("bx"), "a"));
  EXPECT_NE(key(run, 11, 0), key(run, 1, 10));
  EXPECT_NE(key(run, 1, 0, Json::parse("[1]")), key(run, 1, 0, Json::parse("\"[1]\"")));
}

TEST(IdempotencyKey, AMalformedRecordedKeyingIsCorruptNotGuessed) {
  for (const char* bad : {R"({"run_id": "r", "generation": "g", "key_derivation": "2"})",
                          R"({"run_id": 1, "generation": "g", "key_derivation": 2})",
                          R"({"run_id": "r", "generation": "g", "key_derivation": 2, "extra": 1})", "[]"}) {
    auto r = RunKeying::from_json(Json::parse(bad));
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, Code::LedgerCorrupt) << bad;
  }
}

}  // namespace
}  // namespace airlock::ledger
