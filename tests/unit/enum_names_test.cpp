// Every enum declared with AIRLOCK_ENUM (base/enum_names.h): each value has one non-empty name,
// no two values share one, and parsing a printed name gives the value back.
#include <gtest/gtest.h>

#include <set>

#include "egress/address.h"
#include "escape/escape_suite.h"
#include "exec/enforced.h"
#include "linux/apply.h"
#include "plan/plan.h"
#include "policy/task_policy.h"

namespace airlock {
namespace {

template <typename E>
class EnumNames : public ::testing::Test {};

using AllEnums = ::testing::Types<policy::Workload, policy::Tenancy, policy::ExecutorKind, policy::NetworkMode,
                                  policy::ToolProtocol, policy::Confinement, policy::WriteBack, plan::Profile,
                                  plan::Anchor, plan::Access, plan::ProcessLimitMechanism, linux::Step,
                                  egress::AddressClass, escape::Verdict, escape::TierStatus, exec::NetworkEnforced>;
TYPED_TEST_SUITE(EnumNames, AllEnums);

TYPED_TEST(EnumNames, EveryValueHasOneUniqueNameThatParsesBack) {
  using E = TypeParam;
  auto entries = enum_entries<E>();
  ASSERT_FALSE(entries.empty());
  std::set<std::string_view> names;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& [value, name] = entries[i];
    // Declared in order from zero: the table is the enum, with nothing skipped.
    EXPECT_EQ(static_cast<size_t>(value), i) << name;
    EXPECT_FALSE(name.empty());
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
    EXPECT_EQ(to_string(value), name);
    EXPECT_EQ(enum_from_string<E>(name), value) << name;
  }
  EXPECT_EQ(enum_from_string<E>("no such name"), std::nullopt);
  EXPECT_EQ(to_string(static_cast<E>(entries.size())), "?");
  std::string joined;
  for (const auto& e : entries) joined += (joined.empty() ? "" : ", ") + std::string(e.name);
  EXPECT_EQ(enum_name_list<E>(), joined);
}

// The setup step crosses a pipe as a 32-bit integer (linux/apply.cpp's SetupFailure).
TEST(EnumNamesTyped, TheSetupStepKeepsItsWireType) {
  static_assert(std::is_same_v<std::underlying_type_t<linux::Step>, int32_t>);
  EXPECT_EQ(static_cast<int32_t>(linux::Step::None), 0);
  EXPECT_EQ(to_string(linux::Step::DropCapabilities), "drop_capabilities");
}

}  // namespace
}  // namespace airlock
