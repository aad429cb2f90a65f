// The policy schema's descriptions (policy/schema.cpp) cover every field the code reads and writes.
#include <gtest/gtest.h>

#include <algorithm>

#include "policy/schema.h"
#include "policy/task_policy.h"

namespace airlock::policy {
namespace {

TEST(PolicySchema, EveryFieldOfTheEffectivePolicyHasOneDescription) {
  auto problems = schema_problems();
  EXPECT_TRUE(problems.empty()) << "src/policy/schema.cpp: " << ::testing::PrintToString(problems);
  std::vector<std::string> paths;
  for (const auto& f : schema_fields()) paths.push_back(f.path);
  std::sort(paths.begin(), paths.end());
  EXPECT_EQ(std::adjacent_find(paths.begin(), paths.end()), paths.end()) << "a field is described twice";
}

// The keys the parser accepts at `at` (a JSON pointer into the example), read from the
// "(allowed: …)" list of the refusal of an unknown key there.
std::vector<std::string> accepted_keys(const std::string& at) {
  Json doc = schema_example();
  doc[Json::json_pointer(at)]["no_such_key"] = 1;
  auto refused = parse_layer(doc, builtin_default(), true);
  EXPECT_FALSE(refused) << at;
  if (refused) return {};
  const std::string& m = refused.error().message;
  auto start = m.find("(allowed: ");
  EXPECT_NE(start, std::string::npos) << m;
  if (start == std::string::npos) return {};
  std::string list = m.substr(start + 10, m.find(')', start) - start - 10);
  std::vector<std::string> keys;
  for (size_t pos = 0; pos <= list.size();) {
    size_t comma = list.find(", ", pos);
    keys.push_back(list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 2;
  }
  return keys;
}

TEST(PolicySchema, TheExampleSetsEveryKeyTheParserAccepts) {
  // So a field the parser learns is in the example, hence in to_json's output, hence needs a
  // description before schema_problems() is empty again.
  auto p = parse_layer(schema_example(), builtin_default(), true);
  ASSERT_TRUE(p) << p.error().message;
  for (std::string at :
       {"", "/limits", "/agent", "/code_network", "/tools/0", "/egress/0", "/code_network/rules/0"}) {
    auto keys = accepted_keys(at);
    EXPECT_FALSE(keys.empty()) << at;
    // An array item's keys may be spread over its items (a rule has a host or a cidr).
    const Json example = schema_example();
    std::vector<Json> holders = {example[Json::json_pointer(at)]};
    if (at.ends_with("/0")) {
      const Json& items = example[Json::json_pointer(at.substr(0, at.size() - 2))];
      holders.assign(items.begin(), items.end());
    }
    for (const auto& key : keys)
      EXPECT_TRUE(std::any_of(holders.begin(), holders.end(), [&](const Json& h) { return h.contains(key); }))
          << "schema_example() lacks " << at << "/" << key;
  }
}

TEST(PolicySchema, FieldPathsWalkObjectsAndArrayItems) {
  Json j = {{"a", {{"b", 1}}}, {"c", {{{"d", 1}}, {{"e", 2}}}}, {"f", {"x", "y"}}};
  std::vector<std::string> want = {"a", "a.b", "c", "c[].d", "c[].e", "f"};
  EXPECT_EQ(json_field_paths(j), want);
}

}  // namespace
}  // namespace airlock::policy
