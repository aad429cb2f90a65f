// `airlock serve`: the real server on a real unix socket and loopback port, driven over HTTP.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "serve_support.h"
#include "server/server.h"

namespace airlock::testing {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;
using server::HttpClient;
using server::HttpReply;

const char* kSleepA = "3601";  // each test's long tool has its own argv, to find its process
const char* kSleepB = "3602";
const char* kSleepC = "3603";
const char* kSleepD = "3604";
const char* kSleepE = "3605";

std::string policy_json(const CliFixture& f, const std::string& sleep_seconds = "3600") {
  Json p = {{"schema_version", "airlock.task_policy.v1"},
            {"workspace", f.workspace()},
            {"readable", {"src", "reports"}},
            {"write_back_paths", {"reports"}},
            {"tools",
             {{{"name", "count"}, {"argv", {"/usr/bin/wc", "-c", "src/app.py"}}},
              {{"name", "wait"}, {"argv", {"/usr/bin/sleep", sleep_seconds}}, {"timeout_seconds", 3600}}}},
            {"limits", {{"session_budget_seconds", 7200}, {"command_timeout_seconds", 3600}}}};
  return p.dump();
}

const char* kAgentToken = "agent-token-0123456789abcdef";
const char* kOperatorToken = "operator-token-0123456789abcdef";

class Serve : public ::testing::Test, protected ServeFixtureBase {
 protected:
  void SetUp() override {
    f = std::make_unique<CliFixture>(Identity::Self);
    f->put("src/app.py", "print('hi')\n");
  }
  // A token file beside the workspace that the server accepts (ours, mode 0600).
  std::string token_file(const std::string& name, const std::string& token) {
    std::string path = f->workspace() + "/../" + name;
    std::ofstream(path) << token << "\n";
    ::chmod(path.c_str(), 0600);
    return path;
  }
  // Calls session `id`'s long tool ("wait", `/usr/bin/sleep SECONDS`) from a thread of its own,
  // which sets `reply` (then `answered`) when answered; returns once the tool's process runs
  // (false if it never did).
  bool run_long_tool(const std::string& id, const char* seconds, std::thread& runner, HttpReply& reply,
                     std::atomic<bool>* answered = nullptr) {
    runner = std::thread([this, id, &reply, answered] {
      HttpClient own(srv->unix_endpoint());
      reply = must(own.post("/v1/sessions/" + id + "/run_tool", {{"tool", "wait"}}));
      if (answered) *answered = true;
    });
    std::vector<std::string> tool = {"/usr/bin/sleep", seconds};
    for (int i = 0; i < 600 && processes_running(tool).empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return !processes_running(tool).empty();
  }
};

// `airlock serve` is airlock-serve beside airlock; without it, a named refusal, and --help is its.
TEST_F(Serve, TheServeVerbRunsItsSiblingOrRefusesByName) {
  auto help = f->run({"serve", "--help"});
  EXPECT_EQ(help.status, 0) << help.err;
  EXPECT_NE(help.out.find("--token-file"), std::string::npos) << help.out;
  TempDir alone;
  std::string lone = alone.path() + "/airlock";
  fs::copy_file(f->binary(), lone);
  ::chmod(alone.path().c_str(), 0755);
  auto r = f->run_program({lone, "--state-dir", f->state_dir(), "serve"});
  EXPECT_EQ(r.status, 125) << r.err;
  EXPECT_NE(r.err.find("AIRLOCK_CONFIG_ERROR"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(alone.path() + "/airlock-serve"), std::string::npos) << r.err;
}

TEST_F(Serve, SessionLifecycleOverTheUnixSocket) {
  start();
  struct stat st{};
  ASSERT_EQ(::lstat(srv->socket().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  HttpClient c(srv->unix_endpoint());
  auto health = must(c.get("/v1/health"));
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.json()["status"], "ok");

  auto opened = must(c.request("POST", "/v1/sessions", policy_json(*f)));
  if (opened.status == 503 && !require_all_tiers()) GTEST_SKIP() << opened.body;
  ASSERT_EQ(opened.status, 201) << opened.body;
  std::string id = opened.json()["session"];
  EXPECT_EQ(opened.json()["receipt"]["kind"], "session.open");
  EXPECT_EQ(opened.json()["receipt"]["session"], id);
  std::string base = "/v1/sessions/" + id;

  auto read = must(c.post(base + "/read_file", {{"path", "src/app.py"}}));
  EXPECT_EQ(read.status, 200) << read.body;
  EXPECT_EQ(read.json()["content"], "print('hi')\n");
  auto denied = must(c.post(base + "/read_file", {{"path", "/etc/shadow"}}));
  EXPECT_EQ(denied.status, 403);
  EXPECT_EQ(denied.json()["error"]["code"], "AIRLOCK_PATH_DENIED");
  auto wrote = must(c.post(base + "/write_file", {{"path", "reports/r.txt"}, {"content", "done\n"}}));
  EXPECT_EQ(wrote.status, 200) << wrote.body;
  auto listed = must(c.post(base + "/list_dir", {{"path", "src"}}));
  EXPECT_EQ(listed.json()["entries"][0]["name"], "app.py") << listed.body;
  auto ran = must(c.post(base + "/run_tool", {{"tool", "count"}}));
  EXPECT_EQ(ran.json()["stdout"], "12 src/app.py\n") << ran.body;
  auto undeclared = must(c.post(base + "/run_tool", {{"tool", "rm"}}));
  EXPECT_EQ(undeclared.json()["error"]["code"], "AIRLOCK_TOOL_NOT_DECLARED");
  auto egress = must(c.post(base + "/http_fetch", {{"url", "https://example.com/"}}));
  EXPECT_EQ(egress.json()["error"]["code"], "AIRLOCK_EGRESS_DENIED") << egress.body;
  EXPECT_EQ(egress.status, 403);

  auto closed = must(c.post(base + "/close", Json::object()));
  EXPECT_EQ(closed.status, 200) << closed.body;
  EXPECT_EQ(closed.json()["written_back"]["written"], Json::array({"reports/r.txt"}));
  EXPECT_EQ(read_text(f->workspace() + "/reports/r.txt"), "done\n");
  auto after = must(c.post(base + "/read_file", {{"path", "src/app.py"}}));
  EXPECT_EQ(after.status, 409);
  EXPECT_EQ(after.json()["error"]["code"], "AIRLOCK_SESSION_CLOSED");

  auto receipts = must(c.get(base + "/receipts"));
  ASSERT_EQ(receipts.status, 200);
  std::vector<std::string> kinds;
  Json listed_receipts = receipts.json()["receipts"];
  for (const auto& r : listed_receipts) kinds.push_back(r["kind"]);
  ASSERT_FALSE(kinds.empty()) << receipts.body;
  EXPECT_EQ(kinds.front(), "session.open");
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), "session.close"), kinds.end());
  auto verify = f->run({"receipts", "verify", receipts.json()["path"]});
  EXPECT_EQ(verify.status, 0) << verify.err;

  std::string sock = srv->socket();
  EXPECT_EQ(srv->stop(SIGTERM), 0);
  EXPECT_FALSE(exists(sock));  // nothing left behind
}

// A json-protocol tool over HTTP: keyed and ledgered as over the pipe; a session opened with the
// same ?run_id resumes the run (the keying read back: the same step and arguments, the same key).
TEST_F(Serve, AJsonToolIsLedgeredAndASessionResumesItsRunByRunId) {
  start();
  HttpClient c(srv->unix_endpoint());
  Json p = {{"schema_version", "airlock.task_policy.v1"},
            {"workspace", f->workspace()},
            {"tools", {{{"name", "notify"}, {"protocol", "json"},
                        {"argv", {"/bin/sh", "-c", R"(read line; printf '{"sent": %s}' "$line")"}}}}}};
  auto opened = must(c.request("POST", "/v1/sessions?run_id=deploy-7", p.dump()));
  if (opened.status == 503 && !require_all_tiers()) GTEST_SKIP() << opened.body;
  ASSERT_EQ(opened.status, 201) << opened.body;
  EXPECT_EQ(opened.json()["receipt"]["run"]["run_id"], "deploy-7");
  std::string base = "/v1/sessions/" + opened.json()["session"].get<std::string>();
  auto sent = must(c.post(base + "/run_tool", {{"tool", "notify"}, {"args", {{"to", "ops"}}}}));
  ASSERT_EQ(sent.status, 200) << sent.body;
  std::string key = sent.json()["idempotency_key"];
  EXPECT_EQ(sent.json()["result"]["sent"]["idempotencyKey"], key);
  EXPECT_EQ(sent.json()["result"]["sent"]["args"], Json({{"to", "ops"}}));
  EXPECT_EQ(sent.json()["step"], 0);
  auto busy = must(c.request("POST", "/v1/sessions?run_id=deploy-7", p.dump()));
  ASSERT_EQ(busy.status, 201) << busy.body;
  std::string busy_base = "/v1/sessions/" + busy.json()["session"].get<std::string>();
  auto refused = must(c.post(busy_base + "/run_tool", {{"tool", "notify"}, {"args", {{"to", "ops"}}}}));
  EXPECT_EQ(refused.status, 409) << refused.body;
  EXPECT_EQ(refused.json()["error"]["code"], "AIRLOCK_RUN_IN_USE");
  EXPECT_EQ(must(c.post(busy_base + "/close", Json::object())).status, 200);
  EXPECT_EQ(must(c.post(base + "/close", Json::object())).status, 200);

  auto resumed = must(c.request("POST", "/v1/sessions?run_id=deploy-7", p.dump()));
  ASSERT_EQ(resumed.status, 201) << resumed.body;
  std::string again = "/v1/sessions/" + resumed.json()["session"].get<std::string>();
  auto retried = must(c.post(again + "/run_tool", {{"tool", "notify"}, {"args", {{"to", "ops"}}}, {"step", 0}}));
  EXPECT_EQ(retried.json()["idempotency_key"], key) << retried.body;
  auto next = must(c.post(again + "/run_tool", {{"tool", "notify"}, {"args", {{"to", "ops"}}}}));
  EXPECT_EQ(next.json()["step"], 1) << next.body;  // the step after the one named
  EXPECT_EQ(must(c.post(again + "/close", Json::object())).status, 200);
  auto scan = f->run({"ledger", "scan", "--json", sent.json()["ledger"]});
  ASSERT_EQ(scan.status, 0) << scan.err;
  EXPECT_EQ(Json::parse(scan.out)["rows"].size(), 3u) << scan.out;
  auto bad = must(c.request("POST", "/v1/sessions?run_id=..%2Fx", p.dump()));
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_EQ(bad.json()["error"]["code"], "AIRLOCK_OPTION_INVALID");
  EXPECT_EQ(srv->stop(SIGTERM), 0);
}

// Approvals over HTTP: a held call, answered only with the operator's token (never the agent's,
// never none), dispatched once for exactly the call approved; a denial never dispatches.
TEST_F(Serve, OnlyTheOperatorsTokenApprovesAHeldCall) {
  std::string agent = kAgentToken, op = kOperatorToken;
  std::string agent_file = token_file("agent-token", agent), op_file = token_file("operator-token", op);
  auto same = f->run({"serve", "--listen", "127.0.0.1:0", "--token-file", agent_file, "--operator-token-file",
                      agent_file});
  EXPECT_EQ(same.status, 125) << same.err;
  EXPECT_NE(same.err.find("AIRLOCK_OPTION_INVALID"), std::string::npos) << same.err;
  start({"--listen", "127.0.0.1:0", "--token-file", agent_file, "--operator-token-file", op_file});
  HttpClient c(srv->tcp_endpoint(agent));
  Json p = {{"schema_version", "airlock.task_policy.v1"},
            {"workspace", f->workspace()},
            {"tools", {{{"name", "deploy"}, {"protocol", "json"}, {"approval", "required"},
                        {"argv", {"/bin/sh", "-c", R"(read line; printf '{"deployed": %s}' "$line")"}}}}}};
  auto opened = must(c.request("POST", "/v1/sessions?run_id=release-1", p.dump()));
  if (opened.status == 503 && !require_all_tiers()) GTEST_SKIP() << opened.body;
  ASSERT_EQ(opened.status, 201) << opened.body;
  std::string base = "/v1/sessions/" + opened.json()["session"].get<std::string>();
  auto held = must(c.post(base + "/run_tool", {{"tool", "deploy"}, {"args", {{"version", "1.2"}}}}));
  EXPECT_EQ(held.status, 403) << held.body;
  EXPECT_EQ(held.json()["error"]["code"], "AIRLOCK_APPROVAL_REQUIRED");
  std::string id = held.json()["error"]["facts"]["approval_id"];

  // The agent's token, no token, a forged id: nothing approved.
  EXPECT_EQ(must(c.get("/v1/approvals")).status, 401);
  auto self = must(c.post("/v1/approvals/" + id, {{"decision", "approve"}}));
  EXPECT_EQ(self.status, 401) << self.body;
  HttpClient none(srv->unix_endpoint());
  EXPECT_EQ(must(none.post("/v1/approvals/" + id, {{"decision", "approve"}})).status, 401);
  HttpClient operator_(srv->tcp_endpoint(op));
  EXPECT_EQ(must(operator_.post("/v1/sessions", Json::object())).status, 401) << "the operator's token is not the agent's";
  auto forged = must(operator_.post("/v1/approvals/" + std::string(32, 'f'), {{"decision", "approve"}}));
  EXPECT_EQ(forged.status, 404) << forged.body;
  EXPECT_EQ(must(c.post(base + "/run_tool", {{"tool", "deploy"}, {"args", {{"version", "1.2"}}}})).status, 403);

  // The operator sees the request and approves it: that call runs once.
  auto pending = must(operator_.get("/v1/approvals"));
  ASSERT_EQ(pending.status, 200) << pending.body;
  ASSERT_EQ(pending.json()["approvals"].size(), 1u) << pending.body;
  EXPECT_EQ(pending.json()["approvals"][0]["args"], Json({{"version", "1.2"}}));
  auto bad = must(operator_.post("/v1/approvals/" + id, {{"decision", "maybe"}}));
  EXPECT_EQ(bad.status, 400) << bad.body;
  auto approved = must(operator_.post("/v1/approvals/" + id, {{"decision", "approve"}}));
  ASSERT_EQ(approved.status, 200) << approved.body;
  EXPECT_EQ(approved.json()["answered"]["channel"], "http (operator token)");
  EXPECT_EQ(must(c.post(base + "/run_tool", {{"tool", "deploy"}, {"args", {{"version", "1.3"}}}})).status, 403)
      << "another argument is not covered";
  auto ran = must(c.post(base + "/run_tool", {{"tool", "deploy"}, {"args", {{"version", "1.2"}}}}));
  ASSERT_EQ(ran.status, 200) << ran.body;
  EXPECT_EQ(ran.json()["approval_id"], id);
  auto replay = must(c.post(base + "/run_tool", {{"tool", "deploy"}, {"args", {{"version", "1.2"}}}}));
  EXPECT_EQ(replay.status, 403) << "the approval was used twice";
  std::string second = replay.json()["error"]["facts"]["approval_id"];
  auto denied = must(operator_.post("/v1/approvals/" + second, {{"decision", "deny"}}));
  ASSERT_EQ(denied.status, 200) << denied.body;
  EXPECT_EQ(must(c.post(base + "/run_tool", {{"tool", "deploy"}, {"args", {{"version", "1.2"}}}})).status, 403);
  EXPECT_EQ(must(operator_.post("/v1/approvals/" + second, {{"decision", "approve"}})).status, 400)
      << "a denied request was approved after all";
  EXPECT_EQ(must(c.post(base + "/close", Json::object())).status, 200);
  auto scan = f->run({"ledger", "scan", "--json", ran.json()["ledger"]});
  Json rows = Json::parse(scan.out)["rows"];
  ASSERT_EQ(rows.size(), 1u) << scan.out;
  EXPECT_EQ(rows[0]["approval_id"], id);
  EXPECT_EQ(srv->stop(SIGTERM), 0);
}

// A SIGKILL of the server between intent and outcome leaves the approval on the orphaned intent;
// a new server's session resuming the run retries under the same key (the approval's second
// attempt). An approval that expired never dispatches.
TEST_F(Serve, AKilledServerLeavesTheApprovalOnTheOrphanAndAnExpiredOneNeverRuns) {
  std::string op = kOperatorToken, op_file = token_file("operator-token", op);
  start({"--operator-token-file", op_file}, {"PAY_SECONDS=60"});
  Json p = {{"schema_version", "airlock.task_policy.v1"},
            {"workspace", f->workspace()},
            {"tools", {{{"name", "pay"}, {"protocol", "json"}, {"approval", "required"}, {"env", {"PAY_SECONDS"}},
                        {"argv", {"/bin/sh", "-c", R"(read line; sleep "${PAY_SECONDS:-0}"; echo '{"paid": true}')"}}}}}};
  auto session = [&](HttpClient& c) {
    auto opened = must(c.request("POST", "/v1/sessions?run_id=srv-run", p.dump()));
    return opened.status == 201 ? "/v1/sessions/" + opened.json()["session"].get<std::string>() : std::string();
  };
  HttpClient c(srv->unix_endpoint());
  std::string base = session(c);
  if (base.empty() && !require_all_tiers()) GTEST_SKIP() << "no executor for the policy here";
  ASSERT_FALSE(base.empty());
  Json args = {{"to", "ann"}, {"amount", 5}};
  auto held = must(c.post(base + "/run_tool", {{"tool", "pay"}, {"args", args}}));
  ASSERT_EQ(held.json()["error"]["code"], "AIRLOCK_APPROVAL_REQUIRED") << held.body;
  std::string id = held.json()["error"]["facts"]["approval_id"];
  server::Endpoint as_operator = srv->unix_endpoint();
  as_operator.token = op;
  HttpClient approver(as_operator);
  ASSERT_EQ(must(approver.post("/v1/approvals/" + id, {{"decision", "approve"}, {"attempts", 2}})).status, 200);

  std::string ledger = f->state_dir() + "/ledgers/srv-run.jsonl";
  std::thread caller([&] {
    HttpClient c2(srv->unix_endpoint());
    (void)c2.post(base + "/run_tool", {{"tool", "pay"}, {"args", args}});  // cut off by the kill
  });
  for (int i = 0; i < 600 && read_text(ledger).find(R"("phase":"intent")") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  srv->stop(SIGKILL);
  caller.join();
  auto orphaned = Json::parse(f->run({"ledger", "scan", "--json", ledger}).out);
  ASSERT_EQ(orphaned["orphans"].size(), 1u) << orphaned.dump();
  EXPECT_EQ(orphaned["orphans"][0]["approval_id"], id);
  std::string key = orphaned["orphans"][0]["key"];

  start({"--operator-token-file", op_file});
  HttpClient again(srv->unix_endpoint());
  std::string resumed = session(again);
  ASSERT_FALSE(resumed.empty());
  auto retried = must(again.post(resumed + "/run_tool", {{"tool", "pay"}, {"args", args}}));
  ASSERT_EQ(retried.status, 200) << retried.body;
  EXPECT_EQ(retried.json()["idempotency_key"], key);
  EXPECT_EQ(retried.json()["approval_id"], id);

  // Expired: approved for a second, called after it.
  Json later = {{"to", "bob"}, {"amount", 1}};
  auto asked = must(again.post(resumed + "/run_tool", {{"tool", "pay"}, {"args", later}}));
  std::string short_lived = asked.json()["error"]["facts"]["approval_id"];
  server::Endpoint op2 = srv->unix_endpoint();
  op2.token = op;
  HttpClient approver2(op2);
  ASSERT_EQ(must(approver2.post("/v1/approvals/" + short_lived, {{"decision", "approve"}, {"expires_in_seconds", 1}}))
                .status,
            200);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto expired = must(again.post(resumed + "/run_tool", {{"tool", "pay"}, {"args", later}}));
  EXPECT_EQ(expired.json()["error"]["code"], "AIRLOCK_APPROVAL_REQUIRED") << expired.body;
  EXPECT_NE(expired.json()["error"]["facts"]["approval_id"], short_lived);
  EXPECT_EQ(must(again.post(resumed + "/close", Json::object())).status, 200);
  auto after = Json::parse(f->run({"ledger", "scan", "--json", ledger}).out);
  ASSERT_EQ(after["rows"].size(), 1u) << after.dump();
  EXPECT_EQ(after["rows"][0]["approval_id"], id);
  EXPECT_EQ(f->session_dirs(), 0u);
  EXPECT_EQ(srv->stop(SIGTERM), 0);
}

TEST_F(Serve, EachBadRequestGetsItsOwnAnswer) {
  start({"--max-body-bytes", "4096", "--max-sessions", "1"});
  HttpClient c(srv->unix_endpoint());
  auto code = [](const HttpReply& r) { return r.json()["error"]["code"].get<std::string>(); };

  auto bad_policy = must(c.request("POST", "/v1/sessions", R"({"schema_version": "airlock.task_policy.v1", "nope": 1})"));
  EXPECT_EQ(bad_policy.status, 422);
  EXPECT_EQ(code(bad_policy), "AIRLOCK_POLICY_INVALID");
  EXPECT_EQ(bad_policy.json()["error"]["facts"]["path"], "$.nope") << bad_policy.body;
  auto malformed_open = must(c.request("POST", "/v1/sessions", "{\"schema_version\": "));
  EXPECT_EQ(malformed_open.status, 400);
  EXPECT_EQ(code(malformed_open), "AIRLOCK_PROTOCOL_ERROR");

  auto unknown = must(c.post("/v1/sessions/no-such-session/read_file", {{"path", "src/app.py"}}));
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(code(unknown), "AIRLOCK_SESSION_UNKNOWN");
  auto no_route = must(c.get("/v1/nothing-here"));
  EXPECT_EQ(no_route.status, 404);
  EXPECT_EQ(code(no_route), "AIRLOCK_NOT_FOUND");
  auto too_large = must(c.request("POST", "/v1/sessions", std::string(8192, ' ')));
  EXPECT_EQ(too_large.status, 413);
  EXPECT_EQ(code(too_large), "AIRLOCK_REQUEST_TOO_LARGE");
  EXPECT_EQ(too_large.json()["error"]["facts"]["max_body_bytes"], 4096);

  std::string id = open(c, policy_json(*f));
  if (skipped) GTEST_SKIP() << "no executor for the policy here";
  ASSERT_FALSE(id.empty());
  std::string base = "/v1/sessions/" + id;
  auto full = must(c.request("POST", "/v1/sessions", policy_json(*f)));
  EXPECT_EQ(full.status, 503);
  EXPECT_EQ(code(full), "AIRLOCK_CAPACITY_EXHAUSTED");
  EXPECT_EQ(full.json()["error"]["facts"]["max_sessions"], 1);
  auto malformed = must(c.request("POST", base + "/read_file", "{\"path\": "));
  EXPECT_EQ(malformed.status, 400);
  EXPECT_EQ(code(malformed), "AIRLOCK_PROTOCOL_ERROR");
  EXPECT_TRUE(malformed.json()["error"]["facts"].contains("byte")) << malformed.body;
  auto unknown_field = must(c.post(base + "/read_file", {{"path", "src/app.py"}, {"bogus", 1}}));
  EXPECT_EQ(unknown_field.status, 400);
  EXPECT_EQ(code(unknown_field), "AIRLOCK_PROTOCOL_ERROR");
  EXPECT_EQ(unknown_field.json()["error"]["facts"]["path"], "$.bogus");
  auto smuggled = must(c.post(base + "/read_file", {{"path", "reports/x"}, {"action", "write_file"}, {"id", 7}}));
  EXPECT_EQ(smuggled.status, 400);
  EXPECT_EQ(smuggled.json()["error"]["facts"]["path"], "$.action");
  auto not_object = must(c.request("POST", base + "/list_dir", "[1]"));
  EXPECT_EQ(code(not_object), "AIRLOCK_PROTOCOL_ERROR");
  // Every refusal above that reached the session left a receipt.
  auto receipts = must(c.get(base + "/receipts")).json()["receipts"];
  size_t refused = 0;
  for (const auto& r : receipts) refused += r["kind"] == "protocol.refused";
  EXPECT_EQ(refused, 4u);
}

TEST_F(Serve, TcpListenerRequiresTheBearerToken) {
  std::string token_file = f->workspace() + "/../token";
  std::string token = "s3cret-token-0123456789abcdef";
  std::ofstream(token_file) << token << "\n";
  ::chmod(token_file.c_str(), 0644);
  auto loose = f->run({"serve", "--listen", "127.0.0.1:0", "--token-file", token_file});
  EXPECT_EQ(loose.status, 125);
  EXPECT_NE(loose.err.find("AIRLOCK_CUSTODY_UNSAFE"), std::string::npos) << loose.err;
  EXPECT_NE(loose.err.find(token_file), std::string::npos) << loose.err;
  auto remote = f->run({"serve", "--listen", "0.0.0.0:0", "--token-file", token_file});
  EXPECT_EQ(remote.status, 125);
  EXPECT_NE(remote.err.find("AIRLOCK_OPTION_INVALID"), std::string::npos) << remote.err;
  ::chmod(token_file.c_str(), 0600);

  start({"--listen", "127.0.0.1:0", "--token-file", token_file});
  ASSERT_GT(srv->tcp_port(), 0);
  HttpClient local(srv->unix_endpoint());
  std::string id = open(local, policy_json(*f));
  if (skipped) GTEST_SKIP() << "no executor for the policy here";
  ASSERT_FALSE(id.empty());

  HttpClient anonymous(srv->tcp_endpoint(""));
  HttpClient wrong(srv->tcp_endpoint(token + "x"));
  for (HttpClient* c : {&anonymous, &wrong}) {
    auto kill = must(c->post("/v1/sessions/" + id + "/kill", Json::object()));
    EXPECT_EQ(kill.status, 401);
    EXPECT_EQ(kill.json()["error"]["code"], "AIRLOCK_UNAUTHORIZED");
    EXPECT_EQ(kill.header("WWW-Authenticate"), "Bearer");
    EXPECT_EQ(must(c->get("/v1/health")).status, 401);
  }
  // The refused kills touched nothing: the session still reads, and recorded no kill.
  auto read = must(local.post("/v1/sessions/" + id + "/read_file", {{"path", "src/app.py"}}));
  EXPECT_EQ(read.status, 200) << read.body;

  HttpClient authorized(srv->tcp_endpoint(token));
  EXPECT_EQ(must(authorized.get("/v1/health")).status, 200);
  auto tcp_read = must(authorized.post("/v1/sessions/" + id + "/read_file", {{"path", "src/app.py"}}));
  EXPECT_EQ(tcp_read.json()["content"], "print('hi')\n") << tcp_read.body;
  std::remove(token_file.c_str());
}

TEST_F(Serve, LongToolBlocksNoOtherSessionAndKillStopsIt) {
  start();
  HttpClient c(srv->unix_endpoint());
  std::string a = open(c, policy_json(*f, kSleepA));
  if (skipped) GTEST_SKIP() << "no executor for the policy here";
  std::string b = open(c, policy_json(*f));
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(must(c.post("/v1/sessions/" + a + "/write_file", {{"path", "reports/a.txt"}, {"content", "x"}})).status,
            200);

  std::atomic<bool> answered = false;
  HttpReply long_run;
  std::thread runner;
  std::vector<std::string> tool = {"/usr/bin/sleep", kSleepA};
  ASSERT_TRUE(run_long_tool(a, kSleepA, runner, long_run, &answered)) << "the long tool never started";

  // Session b acts while a's tool runs; a's request is still unanswered.
  auto read = must(c.post("/v1/sessions/" + b + "/read_file", {{"path", "src/app.py"}}));
  EXPECT_EQ(read.status, 200) << read.body;
  EXPECT_EQ(must(c.get("/v1/sessions/" + a + "/receipts")).status, 200);
  EXPECT_FALSE(answered);

  auto killed = must(c.post("/v1/sessions/" + a + "/kill", Json::object()));
  EXPECT_EQ(killed.status, 200) << killed.body;
  runner.join();
  EXPECT_EQ(long_run.status, 409) << long_run.body;
  EXPECT_EQ(long_run.json()["error"]["code"], "AIRLOCK_SESSION_KILLED");
  EXPECT_TRUE(wait_until_gone(tool));
  EXPECT_FALSE(exists(f->workspace() + "/reports/a.txt"));  // nothing written back
  auto receipts = must(c.get("/v1/sessions/" + a + "/receipts")).json()["receipts"];
  EXPECT_EQ(receipts.back()["kind"], "session.close");
  EXPECT_EQ(receipts.back()["how"], "killed");
}

// The server's kill: on_close writes nothing back; under write_back "immediate" what landed
// before the kill stays, and each answer said which.
TEST_F(Serve, ServerKillWritesNothingMoreBackAndImmediateLandingsStay) {
  start();
  HttpClient c(srv->unix_endpoint());
  Json on_close = Json::parse(policy_json(*f));
  Json immediate = on_close;
  immediate["write_back"] = "immediate";
  std::string a = open(c, on_close.dump());
  if (skipped) GTEST_SKIP() << "no executor for the policy here";
  std::string b = open(c, immediate.dump());
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  auto wa = must(c.post("/v1/sessions/" + a + "/write_file", {{"path", "reports/a.txt"}, {"content", "a"}}));
  EXPECT_EQ(wa.json()["write_back"]["mode"], "on_close") << wa.body;
  EXPECT_EQ(wa.json()["write_back"]["landed"], false);
  auto wb = must(c.post("/v1/sessions/" + b + "/write_file", {{"path", "reports/b.txt"}, {"content", "b"}}));
  EXPECT_EQ(wb.json()["write_back"]["landed"], true) << wb.body;
  EXPECT_EQ(wb.json()["write_back"]["written_back"]["written"], Json::array({"reports/b.txt"}));
  EXPECT_EQ(read_text(f->workspace() + "/reports/b.txt"), "b");
  for (const auto& id : {a, b}) {
    EXPECT_EQ(must(c.post("/v1/sessions/" + id + "/kill", Json::object())).status, 200);
    auto receipts = must(c.get("/v1/sessions/" + id + "/receipts")).json()["receipts"];
    EXPECT_EQ(receipts.back()["kind"], "session.close");
    EXPECT_EQ(receipts.back()["how"], "killed");
    EXPECT_EQ(receipts.back()["write_back"], false);
  }
  EXPECT_FALSE(exists(f->workspace() + "/reports/a.txt"));
  EXPECT_EQ(read_text(f->workspace() + "/reports/b.txt"), "b");
}

TEST_F(Serve, SigtermKillsRunningSessionsAndLeavesNothingBehind) {
  start();
  HttpClient c(srv->unix_endpoint());
  std::string a = open(c, policy_json(*f, kSleepB));
  if (skipped) GTEST_SKIP() << "no executor for the policy here";
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(must(c.post("/v1/sessions/" + a + "/write_file", {{"path", "reports/a.txt"}, {"content", "x"}})).status,
            200);
  std::string receipts_path = must(c.get("/v1/sessions/" + a + "/receipts")).json()["path"];
  HttpReply long_run;
  std::thread runner;
  std::vector<std::string> tool = {"/usr/bin/sleep", kSleepB};
  ASSERT_TRUE(run_long_tool(a, kSleepB, runner, long_run)) << "the long tool never started";

  std::string sock = srv->socket();
  EXPECT_EQ(srv->stop(SIGTERM), 0);
  runner.join();
  EXPECT_EQ(long_run.json()["error"]["code"], "AIRLOCK_SESSION_KILLED") << long_run.body;
  EXPECT_TRUE(wait_until_gone(tool));
  EXPECT_FALSE(exists(sock));
  EXPECT_FALSE(exists(f->workspace() + "/reports/a.txt"));
  std::string text = read_text(receipts_path);
  std::string last = text.substr(text.rfind('\n', text.size() - 2) + 1);
  auto close = Json::parse(last);
  EXPECT_EQ(close["kind"], "session.close");
  EXPECT_EQ(close["how"], "killed");
  EXPECT_EQ(close["reason"], "server stopped by TERM");
  EXPECT_EQ(f->run({"receipts", "verify", receipts_path}).status, 0);
}

// A session a client leaked can be found (GET /v1/sessions) and stopped with a bare
// `curl -X POST …/kill`: no body is no arguments, never a 400 that leaves the session running.
TEST_F(Serve, OpenSessionsAreListedAndABodylessKillStopsOne) {
  start();
  HttpClient c(srv->unix_endpoint());
  std::string a = open(c, policy_json(*f, kSleepC));
  if (skipped) GTEST_SKIP() << "no executor for the policy here";
  std::string b = open(c, policy_json(*f));
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(must(c.post("/v1/sessions/" + b + "/read_file", {{"path", "src/app.py"}})).status, 200);
  EXPECT_EQ(must(c.post("/v1/sessions/" + b + "/read_file", {{"path", "../../etc/shadow"}})).status, 403);

  auto listed = [&] {
    auto r = must(c.get("/v1/sessions"));
    EXPECT_EQ(r.status, 200) << r.body;
    std::map<std::string, Json> by_id;
    Json body = r.json();  // owned: a range over r.json()["sessions"] would outlive its temporary
    for (const auto& s : body["sessions"]) by_id[s["session"]] = s;
    return by_id;
  };
  auto open_now = listed();
  ASSERT_EQ(open_now.size(), 2u);
  ASSERT_TRUE(open_now.contains(a) && open_now.contains(b));
  const Json& sb = open_now[b];
  EXPECT_EQ(sb["actions"], 2);
  EXPECT_EQ(sb["refused"], 1);
  EXPECT_EQ(sb["killed"], false);
  EXPECT_EQ(sb["policy_digest"].get<std::string>().size(), 64u);
  EXPECT_TRUE(sb["executor"].is_string() && sb["tier"].is_number_integer() && sb["age_seconds"].is_number_integer());
  EXPECT_EQ(sb["receipts"], 3);  // session.open and the two reads

  HttpReply long_run;
  std::thread runner;
  std::vector<std::string> tool = {"/usr/bin/sleep", kSleepC};
  ASSERT_TRUE(run_long_tool(a, kSleepC, runner, long_run)) << "the long tool never started";
  auto killed = must(c.request("POST", "/v1/sessions/" + a + "/kill", ""));
  EXPECT_EQ(killed.status, 200) << killed.body;
  runner.join();
  EXPECT_TRUE(wait_until_gone(tool));
  open_now = listed();
  EXPECT_EQ(open_now.size(), 1u);
  EXPECT_TRUE(open_now.contains(b));

  auto closed = must(c.request("POST", "/v1/sessions/" + b + "/close", ""));
  EXPECT_EQ(closed.status, 200) << closed.body;
  EXPECT_TRUE(listed().empty());
}

TEST_F(Serve, OpenApiDescribesExactlyTheRoutesThatExist) {
  start();
  HttpClient c(srv->unix_endpoint());
  auto served = must(c.get("/v1/openapi.json"));
  ASSERT_EQ(served.status, 200);
  Json doc = served.json();
  EXPECT_EQ(doc, Json::parse(read_text(std::string(AIRLOCK_SOURCE_DIR) + "/src/server/openapi.json")));
  EXPECT_EQ(doc["openapi"].get<std::string>().substr(0, 2), "3.");

  std::set<std::pair<std::string, std::string>> documented, registered;
  for (const auto& [path, ops] : doc["paths"].items())
    for (const auto& [method, op] : ops.items()) {
      std::string m = method;
      std::transform(m.begin(), m.end(), m.begin(), ::toupper);
      documented.emplace(m, path);
    }
  for (const auto& r : server::routes()) registered.emplace(std::string(r.method), std::string(r.path));
  EXPECT_EQ(documented, registered);

  // And the live server answers each one with its own handler, never "no route".
  for (const auto& [method, path] : documented) {
    std::string p = path;
    if (auto at = p.find("{id}"); at != std::string::npos) p.replace(at, 4, "no-such-session");
    auto r = must(c.request(method, p, method == "POST" ? "{" : ""));
    std::string code = r.json().is_object() && r.json().contains("error") ? r.json()["error"]["code"] : "";
    EXPECT_NE(code, "AIRLOCK_NOT_FOUND") << method << " " << path;
    if (path.starts_with("/v1/approvals") || path.starts_with("/v1/console/")) {
      EXPECT_EQ(code, "AIRLOCK_UNAUTHORIZED") << method << " " << path;  // this server has no operator
    } else if (path.find("{id}") != std::string::npos) {
      EXPECT_EQ(code, "AIRLOCK_SESSION_UNKNOWN") << method << " " << path;
    }
  }
  auto executors = must(c.get("/v1/executors")).json();
  EXPECT_EQ(executors["executors"].size(), 5u);  // the tiers this build implements
}

TEST_F(Serve, ReadmePythonClientRuns) {
  start();
  std::string policy = f->write_policy(policy_json(*f));
  auto r = f->run_program({"/usr/bin/python3", std::string(AIRLOCK_SOURCE_DIR) + "/examples/serve_client.py",
                           srv->socket(), policy});
  if (r.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE") != std::string::npos && !require_all_tiers()) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("read: print('hi')"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("refused: 403 AIRLOCK_PATH_DENIED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("closed: ['reports/notes.txt']"), std::string::npos) << r.out;
  EXPECT_EQ(read_text(f->workspace() + "/reports/notes.txt"), "checked\n");
}

// The operator console's API: only the operator's token reads or acts (never the agent's, never
// none, on either listener), its files need none and carry a strict CSP; a session's receipts
// arrive through a long poll as they are appended, with the chain verified, the output tails of
// its tool runs and what its running sandbox uses; the console's kill switch ends a running
// tool and the session is listed as ended, killed by the console.
TEST_F(Serve, TheConsoleAnswersOnlyTheOperatorAndFollowsASessionLive) {
  std::string agent = kAgentToken, op = kOperatorToken;
  start({"--listen", "127.0.0.1:0", "--token-file", token_file("agent-token", agent), "--operator-token-file",
         token_file("operator-token", op)});
  HttpClient c(srv->tcp_endpoint(agent)), operator_(srv->tcp_endpoint(op)), none(srv->unix_endpoint());
  HttpClient anonymous(srv->tcp_endpoint(""));

  // The page and its script: no token needed, served with the policy that keeps them honest.
  auto page = must(anonymous.get("/ui/"));
  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_NE(page.body.find("<title>airlock console</title>"), std::string::npos);
  EXPECT_NE(page.header("Content-Security-Policy").find("script-src 'self'"), std::string::npos);
  EXPECT_NE(page.header("Content-Security-Policy").find("frame-ancestors 'none'"), std::string::npos);
  EXPECT_EQ(page.header("X-Content-Type-Options"), "nosniff");
  auto script = must(anonymous.get("/ui/console.js"));
  EXPECT_EQ(script.status, 200);
  EXPECT_EQ(script.header("Content-Type").rfind("text/javascript", 0), 0u) << script.header("Content-Type");
  for (const char* parser : {"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "DOMParser", "eval("})
    EXPECT_EQ(script.body.find(parser), std::string::npos) << parser << ": agent strings are rendered as text only";
  EXPECT_EQ(must(anonymous.get("/ui/nothing-here")).status, 404);
  // Asked for under another name (a page of another site whose name resolves to 127.0.0.1): refused.
  for (std::string route : {"/ui/", "/v1/console/sessions"}) {
    auto rebound = must(operator_.request("GET", route, "", {{"Host", "attacker.example:" + std::to_string(srv->tcp_port())}}));
    EXPECT_EQ(rebound.status, 401) << route << ": " << rebound.body;
  }
  EXPECT_EQ(must(anonymous.request("GET", "/ui/", "", {{"Host", "localhost"}})).status, 200);

  std::string id = open(c, policy_json(*f, kSleepD));
  if (skipped) GTEST_SKIP() << "no executor for the policy here";
  ASSERT_FALSE(id.empty());
  std::string at = "/v1/console/sessions/" + id;
  for (const std::string& route : std::vector<std::string>{"/v1/console/sessions", "/v1/console/host", at + "/receipts"}) {
    EXPECT_EQ(must(anonymous.get(route)).status, 401) << route;
    EXPECT_EQ(must(c.get(route)).status, 401) << route << ": the agent's token";
    EXPECT_EQ(must(none.get(route)).status, 401) << route << ": the unix socket without the operator's token";
  }
  EXPECT_EQ(must(c.post(at + "/kill", Json::object())).status, 401);
  EXPECT_EQ(must(anonymous.post(at + "/kill", Json::object())).status, 401);

  auto listed = must(operator_.get("/v1/console/sessions"));
  ASSERT_EQ(listed.status, 200) << listed.body;
  ASSERT_EQ(listed.json()["sessions"].size(), 1u) << listed.body;
  EXPECT_EQ(listed.json()["sessions"][0]["session"], id);
  EXPECT_TRUE(listed.json()["sessions"][0]["running"].is_null());
  auto host = must(operator_.get("/v1/console/host"));
  ASSERT_EQ(host.status, 200);
  EXPECT_TRUE(host.json()["executors"].is_array());

  // A tool's output tail, kept beside its receipt (which holds only the digest).
  ASSERT_EQ(must(c.post("/v1/sessions/" + id + "/run_tool", {{"tool", "count"}})).status, 200);
  auto first = must(operator_.get(at + "/receipts?after=0"));
  ASSERT_EQ(first.status, 200) << first.body;
  Json r = first.json();
  ASSERT_EQ(r["receipts"].size(), 2u) << first.body;
  EXPECT_EQ(r["receipts"][0]["kind"], "session.open");
  EXPECT_EQ(r["receipts"][1]["kind"], "run_tool");
  EXPECT_EQ(r["next"], 2);
  EXPECT_EQ(r["chain"]["verified"], true);
  EXPECT_EQ(r["output_tails"]["1"]["stdout"], "12 src/app.py\n");
  EXPECT_EQ(r["session"]["tool_runs"]["cpu_us"].get<uint64_t>() > 0 ||
                r["session"]["tool_runs"]["peak_rss_kb"].get<uint64_t>() > 0,
            true);
  for (std::string bad : std::vector<std::string>{"?after=x", "?after=-1", "?wait_ms=25001", "?after=", "?after=1.5"})
    EXPECT_EQ(must(operator_.get(at + "/receipts" + bad)).status, 400) << bad;

  // A long poll answers with the receipt appended while it waits.
  HttpReply waited;
  std::thread watcher([&] {
    HttpClient own(srv->tcp_endpoint(op));
    waited = must(own.get(at + "/receipts?after=2&wait_ms=20000"));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(must(c.post("/v1/sessions/" + id + "/read_file", {{"path", "../../etc/passwd"}})).status, 403);
  watcher.join();
  ASSERT_EQ(waited.status, 200) << waited.body;
  ASSERT_EQ(waited.json()["receipts"].size(), 1u) << waited.body;
  EXPECT_EQ(waited.json()["receipts"][0]["decision"], "refused");
  EXPECT_EQ(waited.json()["receipts"][0]["error"]["code"], "AIRLOCK_PATH_DENIED");

  // The kill switch from the console, while a tool runs: the console saw it running, with what
  // its sandbox uses; the tool ends and the session is listed as ended, killed.
  HttpReply long_run;
  std::thread runner;
  std::vector<std::string> tool = {"/usr/bin/sleep", kSleepD};
  ASSERT_TRUE(run_long_tool(id, kSleepD, runner, long_run)) << "the long tool never started";
  Json running = must(operator_.get("/v1/console/sessions")).json()["sessions"][0]["running"];
  EXPECT_EQ(running["kind"], "run_tool") << running;
  if (std::string(Json::parse(listed.body)["sessions"][0]["executor"]) == "namespaces") {
    EXPECT_GE(running["usage"]["processes"].get<int>(), 1) << running;
    EXPECT_GT(running["usage"]["memory_bytes"].get<uint64_t>(), 0u) << running;
  }
  auto killed = must(operator_.post(at + "/kill", Json::object()));
  EXPECT_EQ(killed.status, 200) << killed.body;
  runner.join();
  EXPECT_EQ(long_run.json()["error"]["code"], "AIRLOCK_SESSION_KILLED") << long_run.body;
  EXPECT_TRUE(wait_until_gone(tool));
  Json after = must(operator_.get("/v1/console/sessions")).json();
  EXPECT_TRUE(after["sessions"].empty()) << after;
  ASSERT_EQ(after["ended"].size(), 1u) << after;
  EXPECT_EQ(after["ended"][0]["ended"]["how"], "killed");
  EXPECT_EQ(after["ended"][0]["ended"]["reason"], "operator console");
  auto last = must(operator_.get(at + "/receipts?after=3")).json();
  EXPECT_EQ(last["receipts"].back()["kind"], "session.close") << last;
  EXPECT_EQ(last["chain"]["verified"], true);
  EXPECT_EQ(must(operator_.get("/v1/console/sessions/" + std::string(32, 'a') + "/receipts")).status, 404);
  EXPECT_EQ(srv->stop(SIGTERM), 0);
}

// A receipts log changed behind the session's back is shown as not verifying, where it breaks.
TEST_F(Serve, TheConsoleSaysWhereAReceiptChainBreaks) {
  std::string op = kOperatorToken, op_file = token_file("operator-token", op);
  start({"--operator-token-file", op_file});
  HttpClient c(srv->unix_endpoint());
  server::Endpoint as_operator = srv->unix_endpoint();
  as_operator.token = op;
  HttpClient operator_(as_operator);
  std::string id = open(c, policy_json(*f));
  if (skipped) GTEST_SKIP() << "no executor for the policy here";
  ASSERT_EQ(must(c.post("/v1/sessions/" + id + "/read_file", {{"path", "src/app.py"}})).status, 200);
  ASSERT_EQ(must(c.post("/v1/sessions/" + id + "/read_file", {{"path", "src/app.py"}})).status, 200);
  std::string path = must(c.get("/v1/sessions/" + id + "/receipts")).json()["path"];
  {
    std::fstream log(path, std::ios::in | std::ios::out | std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(log)), {});
    size_t second = text.find('\n') + 1;
    size_t digit = text.find("\"duration_us\":", second) + 14;
    ASSERT_LT(digit, text.find('\n', second));
    log.seekp(static_cast<std::streamoff>(digit));
    log.put(text[digit] == '9' ? '8' : '9');  // the second receipt rewritten: the third no longer chains on
  }
  auto r = must(operator_.get("/v1/console/sessions/" + id + "/receipts"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["chain"]["verified"], false) << r.body;
  EXPECT_EQ(r.json()["chain"]["error"]["code"], "AIRLOCK_LEDGER_CORRUPT");
  EXPECT_EQ(r.json()["chain"]["error"]["facts"]["line"], 3);
  EXPECT_EQ(r.json()["receipts"].size(), 2u) << "what verifies before the break is shown";

  // A line changed after the console verified it is seen when it is read again.
  std::string other = open(c, policy_json(*f));
  ASSERT_EQ(must(c.post("/v1/sessions/" + other + "/read_file", {{"path", "src/app.py"}})).status, 200);
  std::string at = "/v1/console/sessions/" + other + "/receipts";
  auto first = must(operator_.get(at));
  ASSERT_EQ(first.json()["chain"]["verified"], true) << first.body;
  ASSERT_EQ(first.json()["receipts"].size(), 2u);
  std::string other_path = must(c.get("/v1/sessions/" + other + "/receipts")).json()["path"];
  {
    std::fstream log(other_path, std::ios::in | std::ios::out | std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(log)), {});
    size_t at_path = text.find("src/app.py", text.find('\n'));
    ASSERT_NE(at_path, std::string::npos);
    log.seekp(static_cast<std::streamoff>(at_path));
    log.put('S');  // the same length: only the line's hash tells
  }
  auto again = must(operator_.get(at));
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.json()["chain"]["verified"], false) << again.body;
  EXPECT_EQ(again.json()["chain"]["error"]["facts"]["line"], 2) << again.body;
  EXPECT_EQ(again.json()["receipts"].size(), 1u) << "the changed line is not shown";
  // And a closed session cannot be killed: the console says it had already ended.
  ASSERT_EQ(must(c.post("/v1/sessions/" + id + "/close", Json::object())).status, 200);
  auto late = must(operator_.post("/v1/console/sessions/" + id + "/kill", Json::object()));
  EXPECT_EQ(late.status, 409) << late.body;
  EXPECT_EQ(late.json()["error"]["code"], "AIRLOCK_SESSION_CLOSED") << late.body;
}

// Requests queued on a busy session cannot take every worker: past threads - reserve they are
// refused at once (AIRLOCK_CAPACITY_EXHAUSTED, with a receipt), and the console's kill switch,
// on the same listener, still answers and ends the running tool.
TEST_F(Serve, TheKillSwitchFindsAWorkerWhileRequestsQueueOnABusySession) {
  std::string op = kOperatorToken, op_file = token_file("operator-token", op);
  start({"--operator-token-file", op_file, "--threads", "4"});  // a reserve of 1: 3 may act or wait
  HttpClient c(srv->unix_endpoint());
  server::Endpoint as_operator = srv->unix_endpoint();
  as_operator.token = op;
  HttpClient operator_(as_operator);
  std::string id = open(c, policy_json(*f, kSleepE));
  if (skipped) GTEST_SKIP() << "no executor for the policy here";
  HttpReply long_run;
  std::thread runner;
  ASSERT_TRUE(run_long_tool(id, kSleepE, runner, long_run)) << "the long tool never started";
  // Five more: two wait for the session (with the running one, the three it takes); three are
  // refused at once.
  std::vector<HttpReply> queued(5);
  std::atomic<int> refused = 0;
  std::vector<std::thread> waiting;
  for (auto& q : queued)
    waiting.emplace_back([&, this] {
      HttpClient own(srv->unix_endpoint());
      q = must(own.post("/v1/sessions/" + id + "/read_file", {{"path", "src/app.py"}}));
      if (q.status == 503) ++refused;
    });
  for (int i = 0; i < 600 && refused < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(refused, 3);
  auto killed = must(operator_.post("/v1/console/sessions/" + id + "/kill", Json::object()));
  EXPECT_EQ(killed.status, 200) << killed.body;
  runner.join();
  for (auto& t : waiting) t.join();
  EXPECT_EQ(long_run.json()["error"]["code"], "AIRLOCK_SESSION_KILLED") << long_run.body;
  std::multiset<std::string> codes;
  for (auto& q : queued) codes.insert(q.json()["error"]["code"].get<std::string>());
  EXPECT_EQ(codes, (std::multiset<std::string>{"AIRLOCK_CAPACITY_EXHAUSTED", "AIRLOCK_CAPACITY_EXHAUSTED",
                                               "AIRLOCK_CAPACITY_EXHAUSTED", "AIRLOCK_SESSION_KILLED",
                                               "AIRLOCK_SESSION_KILLED"}));
  EXPECT_TRUE(wait_until_gone({"/usr/bin/sleep", kSleepE}));
  auto receipts = must(operator_.get("/v1/console/sessions/" + id + "/receipts")).json()["receipts"];
  bool recorded = false;
  for (const auto& r : receipts)
    recorded |= r.contains("error") && r["error"]["code"] == "AIRLOCK_CAPACITY_EXHAUSTED";
  EXPECT_TRUE(recorded) << receipts;
}

}  // namespace
}  // namespace airlock::testing
