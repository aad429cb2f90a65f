// `airlock session`, `airlock receipts` and `airlock broker-suite` from the command line, as a user types them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_support.h"

namespace airlock::testing {
namespace {

using Json = nlohmann::json;

std::vector<Json> lines_of(const std::string& out) {
  std::vector<Json> v;
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) v.push_back(Json::parse(l));
  return v;
}

const char* kPolicy = R"({"schema_version": "airlock.task_policy.v1", "readable": ["src"],
  "write_back_paths": ["reports"], "tools": [{"name": "count", "argv": ["/usr/bin/wc", "-c", "src/app.py"]}]})";

class SessionCli : public ::testing::TestWithParam<Identity> {
 protected:
  void SetUp() override {
    std::string why;
    if (!identity_available(GetParam(), &why)) GTEST_SKIP() << why;
    f = std::make_unique<CliFixture>(GetParam());
    f->put("src/app.py", "print('hi')\n");
    policy = f->write_policy(kPolicy);
  }
  CliResult session(const std::string& input) {
    return f->run_program({f->binary(), "--state-dir", f->state_dir(), "session", "--policy", policy, "--workspace",
                           f->workspace()},
                          input);
  }
  // A missing tier here is a named skip (a failure under AIRLOCK_REQUIRE_ALL_TIERS=1).
  bool refused_for_tier(const CliResult& r) {
    return r.status == 125 && r.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE") != std::string::npos;
  }
  std::unique_ptr<CliFixture> f;
  std::string policy;
};

TEST_P(SessionCli, PipeProtocolAnswersEveryLineInOrder) {
  auto r = session(R"({"id": 1, "action": "read_file", "path": "src/app.py"}
this is not json
{"id": 2, "action": "read_file", "path": "/etc/shadow"}
{"id": 3, "action": "run_tool", "tool": "count"}
{"id": 4, "action": "write_file", "path": "reports/r.txt", "content": "done\n"}
{"id": 5, "action": "close"}
{"id": 6, "action": "list_dir", "path": "src"}
)");
  if (refused_for_tier(r) && !require_all_tiers()) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  auto v = lines_of(r.out);
  ASSERT_EQ(v.size(), 8u) << r.out;
  EXPECT_EQ(v[0]["event"], "session.open");
  EXPECT_EQ(v[1]["id"], 1);
  EXPECT_EQ(v[1]["result"]["content"], "print('hi')\n");
  EXPECT_EQ(v[2]["error"]["code"], "AIRLOCK_PROTOCOL_ERROR");
  EXPECT_EQ(v[3]["error"]["code"], "AIRLOCK_PATH_DENIED");
  EXPECT_EQ(v[4]["result"]["stdout"], "12 src/app.py\n") << v[4].dump();
  EXPECT_EQ(v[5]["ok"], true);
  EXPECT_EQ(v[6]["result"]["written_back"]["written"], Json::array({"reports/r.txt"}));
  EXPECT_EQ(v[7]["error"]["code"], "AIRLOCK_SESSION_CLOSED");
  EXPECT_EQ(read_text(f->workspace() + "/reports/r.txt"), "done\n");

  // The session held a seat in the store, and gave it back with how it ended.
  auto runs = f->run({"runs", "list", "--json"});
  ASSERT_EQ(runs.status, 0) << runs.err;
  auto rj = Json::parse(runs.out);
  ASSERT_EQ(rj["runs"].size(), 1u) << runs.out;
  EXPECT_EQ(rj["runs"][0]["outcome"], "closed");
  EXPECT_FALSE(rj["runs"][0]["executor"].is_null());

  // The receipts: a chain that verifies, a table a person can read, and a break that is found.
  auto files = f->receipts();
  ASSERT_EQ(files.size(), 1u);
  auto ok = f->run({"receipts", "verify", files[0]});
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(ok.out.find("chain intact"), std::string::npos);
  auto show = f->run({"receipts", "show", files[0]});
  EXPECT_EQ(show.status, 0) << show.err;
  EXPECT_NE(show.out.find("AIRLOCK_PATH_DENIED"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("run_tool"), std::string::npos) << show.out;
}

TEST_P(SessionCli, EndOfInputWithoutCloseWritesNothingBack) {
  auto r = session(R"({"action": "write_file", "path": "reports/r.txt", "content": "x"}
)");
  if (refused_for_tier(r) && !require_all_tiers()) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  auto v = lines_of(r.out);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[1]["ok"], true);
  EXPECT_FALSE(exists(f->workspace() + "/reports/r.txt"));
  auto runs = Json::parse(f->run({"runs", "list", "--json"}).out);
  ASSERT_EQ(runs["runs"].size(), 1u);
  EXPECT_EQ(runs["runs"][0]["outcome"], "AIRLOCK_SESSION_KILLED");
}

TEST_P(SessionCli, KillRefusesWhatFollows) {
  auto r = session(R"({"action": "kill"}
{"action": "read_file", "path": "src/app.py"}
)");
  if (refused_for_tier(r) && !require_all_tiers()) GTEST_SKIP() << r.err;
  auto v = lines_of(r.out);
  ASSERT_EQ(v.size(), 3u) << r.out;
  EXPECT_EQ(v[1]["result"]["killed"], true);
  EXPECT_EQ(v[2]["error"]["code"], "AIRLOCK_SESSION_KILLED");
}

INSTANTIATE_TEST_SUITE_P(Identities, SessionCli, ::testing::Values(Identity::Self, Identity::Nobody),
                         [](const auto& info) { return to_string(info.param); });

TEST(SessionCliExample, ReadmePythonClientRuns) {
  CliFixture f(Identity::Self);
  f.put("src/app.py", "print('hi')\n");
  std::string policy = f.write_policy(kPolicy);
  auto r = f.run_program({"/usr/bin/python3", std::string(AIRLOCK_SOURCE_DIR) + "/examples/session_client.py",
                          f.binary(), policy, f.workspace()},
                         "", {{"AIRLOCK_STATE_DIR", f.state_dir()}});
  if (r.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE") != std::string::npos && !require_all_tiers()) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("read: print('hi')"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("refused: AIRLOCK_PATH_DENIED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wrote: True"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("closed: ['reports/notes.txt']"), std::string::npos) << r.out;
  EXPECT_EQ(read_text(f.workspace() + "/reports/notes.txt"), "checked\n");
}

TEST(ReceiptsCli, VerifySaysWhereTheChainBreaks) {
  CliFixture f(Identity::Self);
  auto r = f.run({"session"});  // the built-in default policy; no actions, end of input
  if (r.status == 125 && !require_all_tiers()) GTEST_SKIP() << r.err;
  auto files = f.receipts();
  ASSERT_EQ(files.size(), 1u) << r.err;
  std::string text = read_text(files[0]);
  // Change one byte in the first receipt: the second one's prev no longer matches.
  size_t at = text.find("\"session.open\"");
  ASSERT_NE(at, std::string::npos);
  text[at + 1] = 'S';
  {
    FILE* out = std::fopen(files[0].c_str(), "w");
    std::fwrite(text.data(), 1, text.size(), out);
    std::fclose(out);
  }
  auto v = f.run({"receipts", "verify", files[0]});
  EXPECT_EQ(v.status, 125);
  EXPECT_NE(v.err.find("AIRLOCK_LEDGER_CORRUPT"), std::string::npos) << v.err;
  EXPECT_NE(v.err.find("line 2"), std::string::npos) << v.err;
}

TEST(BrokerSuiteCli, PrintsTheMatrixAndPasses) {
  CliFixture f(Identity::Self);
  auto r = f.run({"broker-suite", "--json"}, {}, 120);
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  auto j = Json::parse(r.out);
  EXPECT_EQ(j["all_contained_and_proven"], true);
  EXPECT_GE(j["attacks"].size(), 18u);
}

}  // namespace
}  // namespace airlock::testing
