// Unit tests for the refusal-code table, Error's JSON form and context, and TRY.
#include "base/error.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace airlock {
namespace {

using Json = nlohmann::json;

// DESIGN.md, "Refusal codes", in the order listed there. Codes are stable API: a name listed
// here may never disappear from the table or change its place.
const std::vector<std::string> kDesignCodes = {
    "AIRLOCK_POLICY_INVALID",
    "AIRLOCK_ISOLATION_POLICY_INVALID",
    "AIRLOCK_EXECUTOR_UNAVAILABLE",
    "AIRLOCK_CONFINEMENT_BELOW_FLOOR",
    "AIRLOCK_PATH_DENIED",
    "AIRLOCK_EGRESS_DENIED",
    "AIRLOCK_TOOL_NOT_DECLARED",
    "AIRLOCK_TOOL_ARGS_DENIED",
    "AIRLOCK_BYPASS_REFUSED",
    "AIRLOCK_LIMIT_EXCEEDED",
    "AIRLOCK_RATE_LIMITED",
    "AIRLOCK_SESSION_KILLED",
    "AIRLOCK_SESSION_CLOSED",
    "AIRLOCK_BUDGET_EXHAUSTED",
    "AIRLOCK_TOOL_TIMEOUT",
    "AIRLOCK_OUTPUT_LIMIT",
    "AIRLOCK_TOOL_FAILED",
    "AIRLOCK_PROTOCOL_ERROR",
    "AIRLOCK_LEDGER_CORRUPT",
    "AIRLOCK_LEDGER_WRITE_FAILED",
    "AIRLOCK_KEY_DERIVATION_UNKNOWN",
    "AIRLOCK_CAPACITY_EXHAUSTED",
    "AIRLOCK_CONFIG_ERROR",
    "AIRLOCK_UNAUTHORIZED",
    "AIRLOCK_CUSTODY_UNSAFE",
    "AIRLOCK_APPROVAL_REQUIRED",
};

TEST(CodeTable, HoldsEveryCodeDesignDocuments) {
  for (const auto& name : kDesignCodes) {
    auto code = code_from_name(name);
    ASSERT_TRUE(code.has_value()) << name << " is in DESIGN.md but not in the code table";
    EXPECT_EQ(to_name(*code), name);
  }
}

TEST(CodeTable, KeepsDesignCodesInTheirOrderWithNewCodesAfterThem) {
  // "A name is never reused or renumbered; add new ones at the end."
  auto all = all_codes();
  ASSERT_GE(all.size(), kDesignCodes.size());
  for (size_t i = 0; i < kDesignCodes.size(); ++i) {
    EXPECT_EQ(to_name(all[i]), kDesignCodes[i]) << "at index " << i;
    EXPECT_EQ(static_cast<size_t>(all[i]), i) << kDesignCodes[i];
  }
}

TEST(CodeTable, NamesAreUnique) {
  std::set<std::string_view> seen;
  for (Code c : all_codes()) EXPECT_TRUE(seen.insert(to_name(c)).second) << to_name(c) << " appears twice";
  EXPECT_EQ(seen.size(), all_codes().size());
}

TEST(CodeTable, EnumeratorsAreUniqueAndInTableOrder) {
  auto all = all_codes();
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(static_cast<size_t>(all[i]), i) << to_name(all[i]);
}

TEST(CodeTable, NamesRoundTripThroughCodeFromName) {
  for (Code c : all_codes()) {
    auto back = code_from_name(to_name(c));
    ASSERT_TRUE(back.has_value()) << to_name(c);
    EXPECT_EQ(*back, c);
  }
}

TEST(CodeTable, UnknownNamesAreNotCodes) {
  EXPECT_FALSE(code_from_name("").has_value());
  EXPECT_FALSE(code_from_name("AIRLOCK_").has_value());
  EXPECT_FALSE(code_from_name("POLICY_INVALID").has_value());
  EXPECT_FALSE(code_from_name("airlock_policy_invalid").has_value());  // names are case-sensitive
  EXPECT_FALSE(code_from_name("AIRLOCK_POLICY_INVALID ").has_value());
  EXPECT_FALSE(code_from_name("AIRLOCK_UNKNOWN").has_value());
}

TEST(CodeTable, EveryNameIsAnUpperCaseAirlockIdentifier) {
  for (Code c : all_codes()) {
    std::string_view name = to_name(c);
    EXPECT_TRUE(name.starts_with("AIRLOCK_")) << name;
    EXPECT_GT(name.size(), std::string_view("AIRLOCK_").size()) << name;
    for (char ch : name) EXPECT_TRUE((ch >= 'A' && ch <= 'Z') || ch == '_') << name;
  }
}

TEST(CodeTable, EveryCodeHasAMeaning) {
  for (Code c : all_codes()) EXPECT_FALSE(meaning(c).empty()) << to_name(c);
}

// ---------------------------------------------------------------- Error

TEST(ErrorJson, HasCodeMessageAndFacts) {
  Error e{Code::PathDenied, "../etc/passwd is outside the workspace", {{"path", "../etc/passwd"}}};
  Json j = e.to_json();
  EXPECT_EQ(j, (Json{{"code", "AIRLOCK_PATH_DENIED"},
                     {"message", "../etc/passwd is outside the workspace"},
                     {"facts", {{"path", "../etc/passwd"}}}}));
}

TEST(ErrorJson, RoundTripsForEveryCode) {
  for (Code c : all_codes()) {
    Error e{c, fmt::format("message for {}", to_name(c)),
            {{"n", 7}, {"list", {1, 2, 3}}, {"nested", {{"k", "v"}}}}};
    auto back = Error::from_json(e.to_json());
    ASSERT_TRUE(back.has_value()) << to_name(c);
    EXPECT_EQ(back->code, c);
    EXPECT_EQ(back->message, e.message);
    EXPECT_EQ(back->facts, e.facts);
    EXPECT_EQ(back->to_json(), e.to_json());
  }
}

TEST(ErrorJson, EmptyFactsAreAnObject) {
  Error e{Code::SessionClosed, "closed"};
  EXPECT_TRUE(e.to_json()["facts"].is_object());
  auto back = Error::from_json(Json{{"code", "AIRLOCK_SESSION_CLOSED"}});
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->message, "");
  EXPECT_EQ(back->facts, Json::object());
}

TEST(ErrorJson, FromJsonRefusesWhatIsNotAnError) {
  EXPECT_FALSE(Error::from_json(Json(nullptr)).has_value());
  EXPECT_FALSE(Error::from_json(Json::array()).has_value());
  EXPECT_FALSE(Error::from_json(Json("AIRLOCK_POLICY_INVALID")).has_value());
  EXPECT_FALSE(Error::from_json(Json{{"message", "no code"}}).has_value());
  EXPECT_FALSE(Error::from_json(Json{{"code", 3}}).has_value());
  EXPECT_FALSE(Error::from_json(Json{{"code", "AIRLOCK_NOT_A_CODE"}}).has_value());
}

TEST(ErrorContext, PrefixesTheMessage) {
  Error e{Code::ConfigError, "permission denied"};
  e.context("opening /etc/airlock.json");
  EXPECT_EQ(e.message, "opening /etc/airlock.json: permission denied");
  e.context("loading config");
  EXPECT_EQ(e.message, "loading config: opening /etc/airlock.json: permission denied");
  EXPECT_EQ(e.code, Code::ConfigError);  // context never changes the code
}

TEST(ErrorContext, WorksOnTemporariesAndKeepsFacts) {
  Error e = Error{Code::LedgerCorrupt, "bad line", {{"line", 3}}}.context("verifying").fact("file", "r.jsonl");
  EXPECT_EQ(e.code, Code::LedgerCorrupt);
  EXPECT_EQ(e.message, "verifying: bad line");
  EXPECT_EQ(e.facts, (Json{{"line", 3}, {"file", "r.jsonl"}}));
}

TEST(ErrorFail, FailErrnoNamesTheErrno) {
  auto u = fail_errno(Code::LedgerWriteFailed, "cannot write r.jsonl", ENOSPC);
  EXPECT_EQ(u.error().code, Code::LedgerWriteFailed);
  EXPECT_TRUE(u.error().message.starts_with("cannot write r.jsonl: ")) << u.error().message;
  EXPECT_EQ(u.error().facts.at("errno"), ENOSPC);
  EXPECT_EQ(u.error().facts.at("errno_name"), "ENOSPC");
}

// ---------------------------------------------------------------- TRY

Result<int> parse_digit(char c) {
  if (c < '0' || c > '9') return fail(Code::PolicyInvalid, fmt::format("'{}' is not a digit", c));
  return c - '0';
}

int g_after_try = 0;  // counts how often the code after a TRY ran

Result<int> sum_of_digits(char a, char b) {
  int x = TRY(parse_digit(a));
  ++g_after_try;
  int y = TRY(parse_digit(b));
  ++g_after_try;
  return x + y;
}

Result<void> check_digit(char c) {
  TRY(parse_digit(c));
  return {};
}

Result<std::string> move_only_chain() {
  auto make = []() -> Result<std::unique_ptr<std::string>> { return std::make_unique<std::string>("moved"); };
  std::unique_ptr<std::string> p = TRY(make());
  return *p;
}

TEST(Try, PassesTheValueThrough) {
  g_after_try = 0;
  auto r = sum_of_digits('3', '4');
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(*r, 7);
  EXPECT_EQ(g_after_try, 2);
}

TEST(Try, ReturnsTheFirstErrorUnchangedAndStopsThere) {
  g_after_try = 0;
  auto r = sum_of_digits('x', '4');
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::PolicyInvalid);
  EXPECT_EQ(r.error().message, "'x' is not a digit");
  EXPECT_EQ(g_after_try, 0);

  g_after_try = 0;
  auto r2 = sum_of_digits('1', 'y');
  ASSERT_FALSE(r2.has_value());
  EXPECT_EQ(r2.error().message, "'y' is not a digit");
  EXPECT_EQ(g_after_try, 1);
}

TEST(Try, WorksInFunctionsReturningVoidResults) {
  EXPECT_TRUE(check_digit('5').has_value());
  auto r = check_digit('z');
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::PolicyInvalid);
}

TEST(Try, MovesMoveOnlyValues) {
  auto r = move_only_chain();
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(*r, "moved");
}

}  // namespace
}  // namespace airlock
