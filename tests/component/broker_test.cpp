// The broker on real directories and a real loopback server: the path guard, limits, the kill
// switch, receipts, the pinned fetch, the protocol adapter, and the attack suite.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include "base/encoding.h"
#include "base/fs.h"
#include "broker/attack_suite.h"
#include "broker/loopback_http.h"
#include "broker/protocol.h"
#include "broker/session.h"
#include "cli_support.h"
#include "ledger/receipts.h"
#include "linux/probe.h"

namespace airlock::broker {
namespace {

using testing::TempDir;

std::string must_read(const std::string& path) {
  auto r = read_file(path);
  return r ? *r : "<unreadable>";
}

// A manual clock: the rate limit and the budget are tested without waiting for them.
struct FakeClock {
  std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
  Clock fn() {
    return [this] { return now; };
  }
};

class BrokerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(make_dirs(ws / "src/deep").has_value());
    ASSERT_TRUE(make_dirs(ws / "reports").has_value());
    ASSERT_TRUE(write_file_atomic(ws / "src/a.txt", "alpha\n").has_value());
    ASSERT_TRUE(write_file_atomic(ws / "src/deep/b.txt", "beta\n").has_value());
    ASSERT_TRUE(write_file_atomic(ws / "README", "top\n").has_value());
    ASSERT_TRUE(write_file_atomic(ws / "src/.ENV", "SECRET=1\n").has_value());
  }
  // Development profile, host executor: these tests are about the broker, not the tier.
  std::unique_ptr<Session> open(std::string extra = "", Clock clock = nullptr, egress::Resolver resolver = nullptr) {
    std::string text = fmt::format(R"({{"schema_version": "airlock.task_policy.v1", "executor": "host",
      "workspace": "{}", "readable": ["src"], "write_back_paths": ["reports"]{}}})",
                                   ws.path(), extra);
    auto pol = policy::parse_layer_text(text, policy::builtin_default(), "test policy");
    EXPECT_TRUE(pol.has_value()) << (pol ? "" : pol.error().message);
    if (!pol) return nullptr;
    SessionOptions so{state.path(), plan::Profile::Development, std::nullopt};
    if (clock) so.clock = clock;
    if (resolver) so.resolver = resolver;
    auto s = Session::open(*pol, linux::probe_host(plan::fact_needs(*pol, exec::built_tiers())), so);
    EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().message);
    return s ? std::move(*s) : nullptr;
  }
  TempDir root, state;
  struct Ws {
    std::string p;
    std::string operator/(const std::string& rel) const { return p + "/" + rel; }
    const std::string& path() const { return p; }
  } ws{root / "ws"};
};

// The design's rule: every receipt names the executor, its tier and the reason it was chosen,
// not only session.open.
TEST_F(BrokerTest, EveryReceiptNamesTheExecutorItsTierAndWhy) {
  auto s = open();
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->read_file("src/a.txt"));
  ASSERT_FALSE(s->read_file("README"));
  ASSERT_TRUE(s->close(true));
  auto rs = testing::read_receipts(s->receipts_path());
  ASSERT_GE(rs.size(), 4u);
  for (const auto& r : rs) {
    EXPECT_EQ(r["sandbox"]["executor"], "host") << r.dump();
    EXPECT_EQ(r["sandbox"]["tier"], 0) << r.dump();
    EXPECT_EQ(r["sandbox"]["reason"], s->plan().why) << r.dump();
    EXPECT_FALSE(s->plan().why.empty());
  }
}

TEST_F(BrokerTest, ReadsInsideReadablePrefixesOnly) {
  auto s = open();
  ASSERT_TRUE(s);
  auto r = s->read_file("src/a.txt");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->data, "alpha\n");
  auto outside = s->read_file("README");
  ASSERT_FALSE(outside);
  EXPECT_EQ(outside.error().code, Code::PathDenied);
  auto missing = s->read_file("src/nope.txt");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Code::NotFound);
}

TEST_F(BrokerTest, RefusesEveryLexicalEscapeWithItsReason) {
  auto s = open();
  ASSERT_TRUE(s);
  for (std::string p : {"/etc/passwd", "src/../README", "../ws/src/a.txt", "src/.env", "src/.Env", "src/.ssh/id_rsa",
                        "src/id_ed25519", ""}) {
    auto r = s->read_file(p);
    ASSERT_FALSE(r) << p;
    EXPECT_EQ(r.error().code, Code::PathDenied) << p;
    EXPECT_TRUE(r.error().facts.contains("reason")) << p;
  }
}

TEST_F(BrokerTest, AProtectedPathIsReadableButNeverWritable) {
  auto s = open();
  ASSERT_TRUE(s);
  for (std::string p : {"reports/.git/hooks/pre-commit", "reports/.bashrc", "reports/.vscode/tasks.json",
                        "reports/.claude/settings.json", "reports/sub/.git"}) {
    auto w = s->write_file(p, "planted\n");
    ASSERT_FALSE(w) << p;
    EXPECT_EQ(w.error().code, Code::PathDenied) << p;
    EXPECT_NE(w.error().facts.value("reason", "").find("a protected path"), std::string::npos) << w.error().message;
    struct stat st{};
    EXPECT_NE(::lstat((s->dirs().view + "/" + p).c_str(), &st), 0) << p << " exists in the view";
  }
}

TEST_F(BrokerTest, PolicyExtendsDeniedNames) {
  auto s = open(R"(, "denied_names": ["deep"])");
  ASSERT_TRUE(s);
  auto r = s->read_file("src/deep/b.txt");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::PathDenied);
  auto l = s->list_dir("src");
  ASSERT_TRUE(l);
  for (const auto& e : l->entries) EXPECT_NE(e.name, "deep");
}

TEST_F(BrokerTest, NeverFollowsASymlinkHardLinkOrSpecialFile) {
  auto s = open();
  ASSERT_TRUE(s);
  const std::string view = s->dirs().view;
  ASSERT_EQ(::symlink((root / "ws/README").c_str(), (view + "/src/deep/link").c_str()), 0);
  ASSERT_EQ(::symlink((view + "/src/deep").c_str(), (view + "/src/dirlink").c_str()), 0);
  ASSERT_EQ(::link((view + "/src/a.txt").c_str(), (view + "/src/hard.txt").c_str()), 0);
  ASSERT_EQ(::mkfifo((view + "/src/fifo").c_str(), 0600), 0);
  for (std::string p : {"src/deep/link", "src/dirlink/b.txt", "src/hard.txt", "src/a.txt", "src/fifo", "src/deep"}) {
    auto r = s->read_file(p);
    ASSERT_FALSE(r) << p;  // a.txt has two links now, so it is refused too
    EXPECT_EQ(r.error().code, Code::PathDenied) << p << ": " << r.error().message;
  }
}

TEST_F(BrokerTest, ASymlinkSwappedInAfterTheCheckIsNotFollowed) {
  auto s = open();
  ASSERT_TRUE(s);
  const std::string f = s->dirs().view + "/src/a.txt";
  int swaps = 0;
  s->path_guard().before_open = [&](const std::string&) {
    ::unlink(f.c_str());
    ASSERT_EQ(::symlink((root / "ws/README").c_str(), f.c_str()), 0);
    ++swaps;
  };
  auto r = s->read_file("src/a.txt");
  EXPECT_EQ(swaps, 1);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::PathDenied);
}

TEST_F(BrokerTest, WritesAtomicallyUnderWriteBackPathsAndCloseWritesBack) {
  auto s = open();
  ASSERT_TRUE(s);
  auto denied = s->write_file("src/a.txt", "x");
  ASSERT_FALSE(denied);
  EXPECT_EQ(denied.error().code, Code::PathDenied);
  auto w = s->write_file("reports/new/deeper/out.txt", "result\n");
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_TRUE(w->created);
  auto again = s->write_file("reports/new/deeper/out.txt", "result 2\n");
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->created);
  auto l = s->list_dir("reports/new/deeper");
  ASSERT_TRUE(l);
  ASSERT_EQ(l->entries.size(), 1u);  // no temporary file left beside it
  EXPECT_EQ(l->entries[0].name, "out.txt");
  EXPECT_FALSE(testing::exists(ws / "reports/new/deeper/out.txt"));  // the view, not the workspace
  auto wb = s->close(true);
  ASSERT_TRUE(wb) << wb.error().message;
  EXPECT_EQ(must_read(ws / "reports/new/deeper/out.txt"), "result 2\n");
}

TEST_F(BrokerTest, SizeLimitsComeFromThePolicy) {
  auto s = open(R"(, "limits": {"max_read_bytes": 4, "max_write_bytes": 3, "max_list_entries": 1})");
  ASSERT_TRUE(s);
  auto big = s->read_file("src/a.txt");
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code, Code::LimitExceeded);
  auto range = s->read_file("src/a.txt", 1, 3);
  ASSERT_TRUE(range) << range.error().message;
  EXPECT_EQ(range->data, "lph");
  EXPECT_EQ(range->size, 6u);
  auto w = s->write_file("reports/x", "four");
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code, Code::LimitExceeded);
  auto l = s->list_dir("src");
  ASSERT_TRUE(l);
  EXPECT_EQ(l->entries.size(), 1u);
  EXPECT_TRUE(l->truncated);
}

TEST_F(BrokerTest, ListingAboveThePrefixesShowsOnlyTheWayDown) {
  auto s = open();
  ASSERT_TRUE(s);
  auto l = s->list_dir(".");
  ASSERT_TRUE(l) << l.error().message;
  std::vector<std::string> names;
  for (const auto& e : l->entries) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"reports", "src"}));
}

TEST_F(BrokerTest, RateLimitCountsTheLastMinute) {
  FakeClock clock;
  auto s = open(R"(, "limits": {"max_actions_per_minute": 3})", clock.fn());
  ASSERT_TRUE(s);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s->read_file("src/a.txt"));
  auto r = s->read_file("src/a.txt");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::RateLimited);
  clock.now += std::chrono::seconds(61);
  EXPECT_TRUE(s->read_file("src/a.txt"));
}

TEST_F(BrokerTest, ASpentBudgetRefusesThenKills) {
  FakeClock clock;
  auto s = open(R"(, "limits": {"session_budget_seconds": 10})", clock.fn());
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->write_file("reports/r.txt", "x"));
  clock.now += std::chrono::seconds(11);
  auto r = s->read_file("src/a.txt");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::BudgetExhausted);
  auto after = s->read_file("src/a.txt");
  ASSERT_FALSE(after);
  EXPECT_EQ(after.error().code, Code::SessionKilled);
  auto c = s->close(true);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, Code::SessionKilled);
  EXPECT_FALSE(testing::exists(ws / "reports/r.txt"));  // killed: nothing written back
}

// The design's rule: a tool stopped because the session's budget ran out says so in its outcome
// (budget_exhausted: true), in the refusal's facts and in its receipt.
TEST_F(BrokerTest, AToolStoppedByTheSessionBudgetRecordsBudgetExhausted) {
  FakeClock clock;
  auto s = open(R"(, "limits": {"session_budget_seconds": 10},
                  "tools": [{"name": "slow", "argv": ["/bin/sleep", "60"], "timeout_seconds": 300}])",
                clock.fn());
  ASSERT_TRUE(s);
  clock.now += std::chrono::milliseconds(9700);  // 0.3 s of the budget left: it binds, not the tool's 300 s
  auto r = s->run_tool("slow", {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::BudgetExhausted) << r.error().message;
  EXPECT_EQ(r.error().facts["outcome"]["budget_exhausted"], true) << r.error().facts.dump();
  EXPECT_EQ(r.error().facts["outcome"]["timed_out"], true) << r.error().facts.dump();
  auto rs = testing::read_receipts(s->receipts_path());
  const Json* ran = nullptr;
  for (const auto& j : rs)
    if (j["kind"] == "run_tool") ran = &j;
  ASSERT_NE(ran, nullptr);
  EXPECT_EQ((*ran)["error"]["facts"]["outcome"]["budget_exhausted"], true) << ran->dump();
}

TEST_F(BrokerTest, ABudgetSpentWhileIdleIsEnforcedBeforeClose) {
  FakeClock clock;
  auto s = open(R"(, "limits": {"session_budget_seconds": 10})", clock.fn());
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->write_file("reports/r.txt", "x"));
  EXPECT_TRUE(s->enforce_budget());
  clock.now += std::chrono::seconds(11);
  auto spent = s->enforce_budget();
  ASSERT_FALSE(spent);
  EXPECT_EQ(spent.error().code, Code::BudgetExhausted);
  auto c = s->close(true, {"end of input", ""});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, Code::SessionKilled);
  EXPECT_FALSE(testing::exists(ws / "reports/r.txt"));
  // The design's rule: a refused action on a killed session gets its receipt, close included.
  auto rs = testing::read_receipts(s->receipts_path());
  ASSERT_GE(rs.size(), 2u);
  const Json& closed = rs[rs.size() - 2];
  EXPECT_EQ(closed["kind"], "session.close");
  EXPECT_EQ(closed["how"], "killed");
  EXPECT_EQ(closed["reason"], "budget exhausted");
  EXPECT_EQ(rs.back()["kind"], "close");
  EXPECT_EQ(rs.back()["decision"], "refused");
  EXPECT_EQ(rs.back()["error"]["code"], "AIRLOCK_SESSION_KILLED");
  exec::Command again_cmd;
  again_cmd.argv = {"/bin/true"};
  auto again = s->run_command(again_cmd);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, Code::SessionKilled);
  rs = testing::read_receipts(s->receipts_path());
  EXPECT_EQ(rs.back()["kind"], "tool.run");
  EXPECT_EQ(rs.back()["decision"], "refused");
}

TEST_F(BrokerTest, ImmediateWriteBackLandsAsEachActionCompletesAndOnlyOnce) {
  auto s = open(R"(, "write_back": "immediate", "tools": [{"name": "rm", "argv": ["/usr/bin/rm", "reports/r.txt"]}])");
  ASSERT_TRUE(s);
  auto w = s->write_file("reports/r.txt", "one");
  ASSERT_TRUE(w) << w.error().message;
  ASSERT_TRUE(w->landing.landed);
  EXPECT_EQ(w->landing.landed->written, std::vector<std::string>{"reports/r.txt"});
  EXPECT_EQ(must_read(ws / "reports/r.txt"), "one");
  // Each landing writes what changed since the last one.
  auto again = s->write_file("reports/r.txt", "two");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->landing.landed->written, std::vector<std::string>{"reports/r.txt"});
  EXPECT_EQ(must_read(ws / "reports/r.txt"), "two");
  auto removed = s->run_tool("rm", {});
  ASSERT_TRUE(removed) << removed.error().message;
  ASSERT_TRUE(removed->landing.landed);
  EXPECT_EQ(removed->landing.landed->deleted, std::vector<std::string>{"reports/r.txt"});
  EXPECT_FALSE(testing::exists(ws / "reports/r.txt"));
  auto closed = s->close(true);
  ASSERT_TRUE(closed);
  EXPECT_TRUE(closed->written.empty());  // everything had landed already
  EXPECT_TRUE(closed->deleted.empty());
}

TEST_F(BrokerTest, KillRefusesEverythingAfterAndWritesNothingBack) {
  auto s = open();
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->write_file("reports/r.txt", "x"));
  ASSERT_TRUE(s->kill());
  for (auto code : {s->read_file("src/a.txt").error().code, s->list_dir("src").error().code,
                    s->run_tool("shell", {"true"}).error().code})
    EXPECT_EQ(code, Code::SessionKilled);
  EXPECT_FALSE(testing::exists(ws / "reports/r.txt"));
}

TEST_F(BrokerTest, KillStopsARunningTool) {
  auto s = open(R"(, "tools": [{"name": "slow", "argv": ["/usr/bin/sleep", "30"], "timeout_seconds": 60}])");
  ASSERT_TRUE(s);
  Result<ToolResult> r = fail(Code::ConfigError, "not run");
  auto started = std::chrono::steady_clock::now();
  std::thread t([&] { r = s->run_tool("slow", {}); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(s->kill());
  t.join();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::SessionKilled);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(20));
}

TEST_F(BrokerTest, ToolsRunOnlyAsDeclared) {
  auto s = open(R"(, "tools": [{"name": "greet", "argv": ["/usr/bin/echo", "hi"]}, {"name": "say", "argv": ["/usr/bin/echo"], "allow_args": true}])");
  ASSERT_TRUE(s);
  auto g = s->run_tool("greet", {});
  ASSERT_TRUE(g) << g.error().message;
  EXPECT_EQ(g->out, "hi\n");
  EXPECT_EQ(s->run_tool("greet", {"x"}).error().code, Code::ToolArgsDenied);
  EXPECT_EQ(s->run_tool("sh", {}).error().code, Code::ToolNotDeclared);
  auto say = s->run_tool("say", {"a b", "$HOME"});
  ASSERT_TRUE(say);
  EXPECT_EQ(say->out, "a b $HOME\n");  // arguments are argv entries, never shell text
}

TEST_F(BrokerTest, ToolOutputIsCappedByThePolicy) {
  auto s = open(R"(, "limits": {"max_output_bytes": 1000}, "tools": [{"name": "flood", "argv": ["/usr/bin/yes"]}])");
  ASSERT_TRUE(s);
  auto r = s->run_tool("flood", {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::OutputLimit);
}

TEST_F(BrokerTest, EveryDecisionIsAChainedReceipt) {
  auto s = open();
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->read_file("src/a.txt"));
  ASSERT_FALSE(s->read_file("/etc/passwd"));
  ASSERT_TRUE(s->write_file("reports/x", "secret content"));
  auto rs = s->receipts();
  ASSERT_TRUE(rs);
  ASSERT_EQ(rs->size(), 4u);
  EXPECT_EQ((*rs)[0]["kind"], "session.open");
  EXPECT_EQ((*rs)[1]["kind"], "read_file");
  EXPECT_EQ((*rs)[1]["decision"], "allowed");
  EXPECT_EQ((*rs)[2]["decision"], "refused");
  EXPECT_EQ((*rs)[2]["error"]["code"], "AIRLOCK_PATH_DENIED");
  EXPECT_TRUE((*rs)[3].contains("args_digest"));
  EXPECT_EQ((*rs)[3].dump().find("secret content"), std::string::npos);  // a digest, never the content
  auto chain = ledger::verify_chain(s->receipts_path());
  ASSERT_TRUE(chain) << chain.error().message;
  EXPECT_EQ(chain->receipts, 4u);
}

TEST_F(BrokerTest, ProtocolAdapterIsStrict) {
  auto s = open();
  ASSERT_TRUE(s);
  auto ok = handle_request(*s, {{"id", 7}, {"action", "read_file"}, {"path", "src/a.txt"}});
  EXPECT_EQ(ok["id"], 7);
  EXPECT_EQ(ok["ok"], true);
  EXPECT_EQ(ok["result"]["content"], "alpha\n");
  for (const Json& bad : {Json::array(), Json{{"action", "read_file"}}, Json{{"action", "read_file"}, {"path", 1}},
                          Json{{"action", "read_file"}, {"path", "src/a.txt"}, {"follow", true}},
                          Json{{"action", "format_disk"}}}) {
    auto r = handle_request(*s, bad);
    EXPECT_EQ(r["ok"], false) << bad.dump();
    EXPECT_EQ(r["error"]["code"], "AIRLOCK_PROTOCOL_ERROR") << bad.dump();
  }
  auto rs = s->receipts();
  ASSERT_TRUE(rs);
  EXPECT_EQ(rs->back()["kind"], "protocol.refused");  // refused requests leave receipts too
  auto w = handle_request(*s, {{"action", "write_file"}, {"path", "reports/bin"}, {"content_base64", "AAEC/w=="}});
  ASSERT_EQ(w["ok"], true) << w.dump();
  auto r = handle_request(*s, {{"action", "list_dir"}, {"path", "reports"}});
  EXPECT_EQ(r["result"]["entries"][0]["size"], 4);
}

// A loopback server for the fetch tests; names resolve through a table.
class FetchTest : public BrokerTest {
 protected:
  void SetUp() override {
    BrokerTest::SetUp();
    auto s = LoopbackHttp::start("127.0.0.1", 0, [](const HttpRequest& req) {
      if (req.path == "/moved") return HttpReply{302, {{"Location", "http://elsewhere.test/"}}, ""};
      if (req.path == "/slow") {
        std::this_thread::sleep_for(std::chrono::milliseconds(3000));
        return HttpReply{200, {}, "late"};
      }
      return HttpReply{200, {}, "hello " + req.header("X-Test")};
    });
    ASSERT_TRUE(s) << s.error().message;
    svr = std::move(*s);
    port = svr->port();
  }
  egress::Resolver resolver() {
    return [](const std::string& host) -> Result<std::vector<egress::IpAddress>> {
      if (host == "svc.test") return std::vector<egress::IpAddress>{*egress::parse_literal("127.0.0.1")};
      return fail(Code::EgressDenied, host + " does not resolve");
    };
  }
  std::string rules(bool allow_private) {
    return fmt::format(R"(, "egress": [{{"host": "svc.test", "ports": [{}], "schemes": ["http", "https"], "allow_private": {}}}],
                          "limits": {{"fetch_timeout_seconds": 1}})",
                       port, allow_private ? "true" : "false");
  }
  std::unique_ptr<LoopbackHttp> svr;
  int port = 0;
};

TEST_F(FetchTest, FetchesFromThePinnedCheckedAddress) {
  auto s = open(rules(true), nullptr, resolver());
  ASSERT_TRUE(s);
  auto r = s->http_fetch({"GET", fmt::format("http://svc.test:{}/", port), {{"X-Test", "yes"}}, {}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello yes");
  EXPECT_EQ(r->pinned_address, "127.0.0.1");
}

TEST_F(FetchTest, PrivateAddressNeedsAllowPrivate) {
  auto s = open(rules(false), nullptr, resolver());
  ASSERT_TRUE(s);
  auto r = s->http_fetch({"GET", fmt::format("http://svc.test:{}/", port), {}, {}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::EgressDenied);
}

// Allowed, and down or gone: the network failed, the policy did not refuse (AIRLOCK_EGRESS_FAILED,
// with the address and errno), in the answer and in the receipt.
TEST_F(FetchTest, AnAllowedDestinationThatIsDownOrDoesNotResolveFailsNotDenied) {
  auto s = open(fmt::format(R"(, "egress": [{{"host": "svc.test", "ports": [{0}], "schemes": ["http"], "allow_private": true}},
                                           {{"host": "gone.test", "ports": [{0}], "schemes": ["http"]}}])",
                            port),
                nullptr, resolver());
  ASSERT_TRUE(s);
  svr.reset();  // nothing listens on the port now
  auto down = s->http_fetch({"GET", fmt::format("http://svc.test:{}/", port), {}, {}});
  ASSERT_FALSE(down);
  EXPECT_EQ(down.error().code, Code::EgressFailed) << down.error().message;
  EXPECT_EQ(down.error().facts.value("errno_name", ""), "ECONNREFUSED") << down.error().facts.dump();
  EXPECT_EQ(down.error().facts.value("pinned_address", ""), "127.0.0.1");
  auto gone = s->http_fetch({"GET", fmt::format("http://gone.test:{}/", port), {}, {}});
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, Code::EgressFailed) << gone.error().message;
  auto rs = s->receipts();
  ASSERT_TRUE(rs);
  EXPECT_EQ((*rs)[rs->size() - 2]["error"]["code"], "AIRLOCK_EGRESS_FAILED");
  EXPECT_EQ(rs->back()["error"]["code"], "AIRLOCK_EGRESS_FAILED");
  // Still denied, not failed: a host on no rule.
  auto other = s->http_fetch({"GET", fmt::format("http://elsewhere.test:{}/", port), {}, {}});
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().code, Code::EgressDenied);
}

TEST_F(FetchTest, RedirectsAreReturnedNotFollowed) {
  auto s = open(rules(true), nullptr, resolver());
  ASSERT_TRUE(s);
  auto r = s->http_fetch({"GET", fmt::format("http://svc.test:{}/moved", port), {}, {}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 302);
  EXPECT_EQ(r->redirect_to, "http://elsewhere.test/");
}

TEST_F(FetchTest, SlowResponsesTimeOut) {
  auto s = open(rules(true), nullptr, resolver());
  ASSERT_TRUE(s);
  auto r = s->http_fetch({"GET", fmt::format("http://svc.test:{}/slow", port), {}, {}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::ToolTimeout);
}

TEST_F(FetchTest, TlsCertificatesAreVerified) {
  // A real TLS server (openssl s_server) with a self-signed certificate for the right name:
  // not trusted, so refused.
  TempDir tls;
  std::string cmd = fmt::format(
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=svc.test -addext subjectAltName=DNS:svc.test "
      "-keyout {0}/key.pem -out {0}/cert.pem >/dev/null 2>&1",
      tls.path());
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  // A free port: bind one, note it, let it go for s_server.
  auto probe = LoopbackHttp::start("127.0.0.1", 0, [](const HttpRequest&) { return HttpReply{}; });
  ASSERT_TRUE(probe);
  int tls_port = (*probe)->port();
  probe->reset();
  pid_t pid = ::fork();
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_RDWR);
    ::dup2(devnull, 0);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    std::string accept = fmt::format("127.0.0.1:{}", tls_port);
    ::execlp("openssl", "openssl", "s_server", "-accept", accept.c_str(), "-cert", (tls / "cert.pem").c_str(), "-key",
             (tls / "key.pem").c_str(), "-www", "-naccept", "1", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ASSERT_GT(pid, 0);
  std::string extra = fmt::format(R"(, "egress": [{{"host": "svc.test", "ports": [{}], "allow_private": true}}])", tls_port);
  auto s = open(extra, nullptr, resolver());
  ASSERT_TRUE(s);
  Result<egress::FetchResponse> r = fail(Code::ConfigError, "not fetched");
  // s_server needs a moment to listen: a refused connection is retried, nothing else is.
  for (int i = 0; i < 50; ++i) {
    r = s->http_fetch({"GET", fmt::format("https://svc.test:{}/", tls_port), {}, {}});
    if (r || r.error().code != Code::EgressFailed) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::ToolFailed) << r.error().message;
  EXPECT_NE(r.error().message.find("certificate"), std::string::npos) << r.error().message;
}

// Issue 26: a file name that is not UTF-8, written back, is recorded: the close receipt is
// written (lossy name, exact bytes beside it) and the chain verifies.
TEST_F(BrokerTest, AWriteBackOfANameThatIsNotUtf8IsRecordedExactly) {
  auto s = open();
  ASSERT_TRUE(s);
  const std::string name = "reports/\xff";
  auto w = s->write_file(name, "bytes\n");
  ASSERT_TRUE(w) << w.error().message;
  auto listed = handle_request(*s, {{"id", 1}, {"action", "list_dir"}, {"path", "reports"}});
  ASSERT_TRUE(listed["ok"].get<bool>()) << listed.dump(-1, ' ', false, Json::error_handler_t::replace);
  EXPECT_NO_THROW((void)canonical_json(listed));  // the response is sendable as it is
  ASSERT_TRUE(listed["result"].contains("not_utf8"));
  EXPECT_EQ(base64_decode(listed["result"]["not_utf8"][0]["base64"].get<std::string>()), "\xff");
  auto wb = s->close(true);
  ASSERT_TRUE(wb) << wb.error().message;
  EXPECT_EQ(must_read(ws / name), "bytes\n");
  auto rs = s->receipts();
  ASSERT_TRUE(rs) << rs.error().message;
  ASSERT_EQ(rs->back()["kind"], "session.close");
  EXPECT_NE(rs->back().dump().find(base64_encode(name)), std::string::npos) << rs->back().dump();
  auto chain = ledger::verify_chain(s->receipts_path());
  ASSERT_TRUE(chain) << chain.error().message;
  EXPECT_EQ(chain->receipts, rs->size());
}

TEST(BrokerAttackSuite, EveryAttackIsContainedAndBreachesWithoutTheBroker) {
  TempDir state;
  auto results = run_attack_suite({state.path(), linux::probe_host()});
  ASSERT_TRUE(results) << results.error().message;
  EXPECT_GE(results->size(), 18u);
  for (const auto& r : *results) {
    EXPECT_TRUE(r.contained) << r.name << ": expected " << r.expected << ", broker " << r.broker << " (" << r.detail << ")";
    EXPECT_TRUE(r.baseline_breached) << r.name << ": the plain-API baseline did not breach (" << r.baseline_detail << ")";
  }
}

}  // namespace
}  // namespace airlock::broker
