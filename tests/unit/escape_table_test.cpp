// The escape suite's table (src/escape/scenarios.inc): every row a distinct snake_case name that
// round-trips, the door group last, and a probe's report read back by its name.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "escape/escape_suite.h"

namespace airlock::escape {
namespace {

TEST(EscapeTable, EveryScenarioHasADistinctSnakeCaseNameThatRoundTrips) {
  std::set<std::string_view> names;
  for (Breach b : all_breaches()) {
    std::string_view name = to_string(b);
    SCOPED_TRACE(std::string(name));
    EXPECT_FALSE(name.empty());
    auto snake = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; };
    EXPECT_TRUE(std::all_of(name.begin(), name.end(), snake));
    EXPECT_TRUE(names.insert(name).second) << "twice in the table";
    EXPECT_EQ(breach_from_string(name), b);
  }
  EXPECT_EQ(names.size(), all_breaches().size());
  EXPECT_EQ(breach_from_string("host_sleeper"), std::nullopt) << "a program of the probe's, not a breach";
  EXPECT_EQ(breach_from_string("nope"), std::nullopt);
}

// The conformance test pins the list itself; here, only its shape.
TEST(EscapeTable, TheDoorGroupIsTheLastRowsAndOnlyThey) {
  size_t doors = 0;
  bool in_door_group = false;
  for (Breach b : all_breaches()) {
    SCOPED_TRACE(std::string(to_string(b)));
    EXPECT_EQ(is_door_probe(b), to_string(b).starts_with("door_"));
    if (in_door_group) {
      EXPECT_TRUE(is_door_probe(b)) << "a row of another group after the door's";
    }
    in_door_group = in_door_group || is_door_probe(b);
    doors += is_door_probe(b);
  }
  EXPECT_GT(doors, 0u);
  EXPECT_EQ(door_probe_count(), doors);
}

TEST(EscapeTable, AProbesReportIsTheLastLineThatNamesIt) {
  std::string out =
      "noise\n"
      "{\"probe\":\"read_host_file\",\"breached\":false,\"evidence\":\"first\",\"errno\":2}\n"
      "{\"probe\":\"other\",\"breached\":true,\"evidence\":\"not this one\",\"errno\":0}\n"
      "{\"probe\":\"read_host_file\",\"breached\":true,\"evidence\":\"last\",\"errno\":0,\"daemon_pid\":7}\n"
      "{not json\n";
  auto r = parse_probe_report(out, "read_host_file");
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->breached);
  EXPECT_EQ(r->evidence, "last");
  EXPECT_EQ(r->extra, Json({{"daemon_pid", 7}}));
  EXPECT_EQ(parse_probe_report(out, "exceed_cpu"), std::nullopt);
  EXPECT_EQ(probe_started_line("exceed_cpu"), "airlock-probe exceed_cpu: started");
}

}  // namespace
}  // namespace airlock::escape
