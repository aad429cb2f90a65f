// `airlock mcp`: JSON-RPC over stdio, by hand and with the official MCP TypeScript SDK as the client.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

#include "cli_support.h"
#include "server/mcp.h"

namespace airlock::testing {
namespace {

using Json = nlohmann::json;

const char* kPolicy = R"({"schema_version": "airlock.task_policy.v1", "readable": ["src", "reports"],
  "write_back_paths": ["reports"], "egress": [{"host": "docs.python.org", "ports": [443], "schemes": ["https"]}],
  "tools": [{"name": "count", "argv": ["/usr/bin/wc", "-c", "src/app.py"]},
            {"name": "grep", "argv": ["/usr/bin/grep", "-n"], "allow_args": true},
            {"name": "fails", "argv": ["/bin/sh", "-c", "echo 2 tests failed; echo oops >&2; exit 3"]},
            {"name": "deploy", "protocol": "json", "argv": ["/bin/sh", "-c", "read line; printf '{\"request\": %s}' \"$line\""]},
            {"name": "release", "protocol": "json", "approval": "required", "argv": ["/bin/sh", "-c", "read line; echo '{\"released\": true}'"]}]})";

std::string rpc(int id, const std::string& method, const Json& params = Json::object()) {
  return Json{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}}.dump() + "\n";
}

std::string call(int id, const std::string& tool, const Json& args) {
  return rpc(id, "tools/call", {{"name", tool}, {"arguments", args}});
}

class Mcp : public ::testing::Test {
 protected:
  void SetUp() override {
    f = std::make_unique<CliFixture>(Identity::Self);
    f->put("src/app.py", "print('hi')\n");
    policy = f->write_policy(kPolicy);
  }
  bool no_executor(const CliResult& r) {
    return r.status == 125 && r.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE") != std::string::npos;
  }
  std::unique_ptr<CliFixture> f;
  std::string policy;
};

TEST_F(Mcp, AnswersJsonRpcOverStdioAndWritesBackWhenInputEnds) {
  std::string input =
      rpc(1, "initialize", {{"protocolVersion", "2025-06-18"}, {"capabilities", Json::object()},
                            {"clientInfo", {{"name", "test"}, {"version", "1"}}}}) +
      R"({"jsonrpc": "2.0", "method": "notifications/initialized"})" "\n" + rpc(2, "tools/list") +
      call(3, "read_file", {{"path", "src/app.py"}}) + call(4, "read_file", {{"path", "../../etc/passwd"}}) +
      call(5, "write_file", {{"path", "reports/r.txt"}, {"content", "done\n"}}) + call(6, "count", Json::object()) +
      call(7, "http_fetch", {{"url", "https://example.com/"}}) + call(8, "grep", {{"args", {"hi", "src/app.py"}}}) +
      call(9, "no_such_tool", Json::object()) + rpc(10, "resources/list") + rpc(11, "ping") + "not json\n" +
      call(12, "read_file", {{"path", "src/app.py"}, {"action", "write_file"}}) + call(13, "fails", Json::object());
  auto r = f->run_program({f->binary(), "--state-dir", f->state_dir(), "mcp", "--policy", policy, "--workspace",
                           f->workspace()},
                          input);
  if (no_executor(r) && !require_all_tiers()) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  std::map<int, Json> by_id;
  std::vector<Json> no_id;
  std::istringstream lines(r.out);
  for (std::string l; std::getline(lines, l);) {
    Json j = Json::parse(l);  // stdout holds nothing but JSON-RPC messages
    EXPECT_EQ(j["jsonrpc"], "2.0");
    if (j["id"].is_number())
      by_id[j["id"].get<int>()] = j;
    else
      no_id.push_back(j);
  }
  EXPECT_EQ(by_id.size(), 13u) << r.out;  // the notification got no answer
  EXPECT_EQ(by_id[1]["result"]["protocolVersion"], "2025-06-18");
  EXPECT_EQ(by_id[1]["result"]["serverInfo"]["name"], "airlock");
  std::vector<std::string> names;
  for (const auto& t : by_id[2]["result"]["tools"]) {
    names.push_back(t["name"]);
    EXPECT_EQ(t["inputSchema"]["type"], "object") << t.dump();
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"read_file", "write_file", "list_dir", "http_fetch", "count", "grep", "fails",
                                      "deploy", "release"}));
  // Titles and annotations: a client can tell reading from changing, and the open world.
  std::map<std::string, Json> tool;
  Json listed = by_id[2]["result"]["tools"];
  for (const auto& t : listed) tool[t["name"]] = t;
  for (const auto& [name, t] : tool) EXPECT_TRUE(t["title"].is_string() && !t["title"].empty()) << t.dump();
  EXPECT_EQ(tool["read_file"]["annotations"]["readOnlyHint"], true);
  EXPECT_EQ(tool["list_dir"]["annotations"]["readOnlyHint"], true);
  EXPECT_EQ(tool["write_file"]["annotations"]["readOnlyHint"], false);
  EXPECT_EQ(tool["write_file"]["annotations"]["destructiveHint"], true);
  EXPECT_EQ(tool["http_fetch"]["annotations"]["openWorldHint"], true);
  EXPECT_EQ(tool["read_file"]["annotations"]["openWorldHint"], false);
  EXPECT_EQ(tool["count"]["annotations"]["readOnlyHint"], false);
  EXPECT_EQ(tool["count"]["annotations"]["openWorldHint"], false);  // code_network is off
  EXPECT_TRUE(by_id[2]["result"]["tools"][5]["inputSchema"]["properties"].contains("args"));
  EXPECT_TRUE(by_id[2]["result"]["tools"][4]["inputSchema"]["properties"].empty());
  // A json-protocol tool takes one object of arguments, and a step; it acts on the world outside.
  EXPECT_EQ(tool["deploy"]["inputSchema"]["properties"]["args"]["type"], "object") << tool["deploy"].dump();
  EXPECT_EQ(tool["deploy"]["inputSchema"]["properties"]["step"]["type"], "integer");
  EXPECT_EQ(tool["deploy"]["annotations"]["openWorldHint"], true);

  EXPECT_EQ(by_id[3]["result"]["isError"], false);
  EXPECT_EQ(by_id[3]["result"]["content"][0]["text"], "print('hi')\n");
  const Json& refused = by_id[4]["result"];
  EXPECT_EQ(refused["isError"], true);
  std::string why = refused["content"][0]["text"];
  EXPECT_NE(why.find("AIRLOCK_PATH_DENIED"), std::string::npos) << why;
  EXPECT_NE(why.find("only src/, reports/"), std::string::npos) << why;  // what the policy allows instead
  // Said plainly; no claim that other routes are closed where this refusal ("..") cannot tell.
  EXPECT_NE(why.find("do not try to work around it"), std::string::npos) << why;
  EXPECT_EQ(why.find("refused too"), std::string::npos) << why;
  EXPECT_EQ(by_id[5]["result"]["isError"], false) << by_id[5].dump();
  EXPECT_EQ(by_id[6]["result"]["structuredContent"]["stdout"], "12 src/app.py\n") << by_id[6].dump();
  // A tool's output comes first, then how it ended; a failing command is an error result.
  std::string counted = by_id[6]["result"]["content"][0]["text"];
  EXPECT_EQ(counted.rfind("--- stdout\n12 src/app.py\n--- exit 0 in ", 0), 0u) << counted;
  EXPECT_EQ(by_id[6]["result"]["isError"], false);
  std::string failed = by_id[13]["result"]["content"][0]["text"];
  EXPECT_EQ(by_id[13]["result"]["isError"], true) << by_id[13].dump();
  EXPECT_EQ(failed.rfind("--- stdout\n2 tests failed\n--- stderr\noops\n--- exit 3 in ", 0), 0u) << failed;
  EXPECT_EQ(by_id[13]["result"]["structuredContent"]["outcome"]["exit_code"], 3);
  std::string egress = by_id[7]["result"]["content"][0]["text"];
  EXPECT_EQ(by_id[7]["result"]["isError"], true);
  EXPECT_NE(egress.find("AIRLOCK_EGRESS_DENIED"), std::string::npos) << egress;
  EXPECT_NE(egress.find("docs.python.org"), std::string::npos) << egress;
  EXPECT_EQ(by_id[8]["result"]["structuredContent"]["stdout"], "1:print('hi')\n") << by_id[8].dump();
  EXPECT_EQ(by_id[9]["error"]["code"], -32602);
  EXPECT_EQ(by_id[10]["error"]["code"], -32601);
  EXPECT_EQ(by_id[11]["result"], Json::object());
  ASSERT_EQ(no_id.size(), 1u);
  EXPECT_EQ(no_id[0]["error"]["code"], -32700);
  EXPECT_EQ(by_id[12]["result"]["isError"], true);
  EXPECT_NE(by_id[12]["result"]["content"][0]["text"].get<std::string>().find("AIRLOCK_PROTOCOL_ERROR"),
            std::string::npos);

  // End of input closed the session and wrote back; the receipts chain verifies.
  EXPECT_EQ(read_text(f->workspace() + "/reports/r.txt"), "done\n");
  auto files = f->receipts();
  ASSERT_EQ(files.size(), 1u);
  auto verify = f->run({"receipts", "verify", files[0]});
  EXPECT_EQ(verify.status, 0) << verify.err;
}

// The help line of `--policy` for `airlock VERB --help`.
std::string policy_help_line(CliFixture& fx, const std::string& verb) {
  auto r = fx.run_program({fx.binary(), verb, "--help"});
  EXPECT_EQ(r.status, 0) << r.err;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);)
    if (line.find("--policy") != std::string::npos) return line;
  ADD_FAILURE() << "no --policy in `airlock " << verb << " --help`:\n" << r.out;
  return "";
}

TEST(McpHelp, PolicyIsRequiredAndNoDefaultIsOffered) {
  CliFixture fx(Identity::Self);
  std::string mcp = policy_help_line(fx, "mcp");
  EXPECT_NE(mcp.find("REQUIRED"), std::string::npos) << mcp;
  EXPECT_EQ(mcp.find("when absent"), std::string::npos) << mcp;
  // `airlock session` runs without --policy, and says under what.
  std::string session = policy_help_line(fx, "session");
  EXPECT_EQ(session.find("REQUIRED"), std::string::npos) << session;
  EXPECT_NE(session.find("the built-in default when absent"), std::string::npos) << session;
}

TEST_F(Mcp, OfficialTypeScriptSdkDrivesIt) {
  std::string dir = std::string(AIRLOCK_SOURCE_DIR) + "/tests/mcp-client";
  if (!exists("/usr/bin/node") || !exists(dir + "/node_modules/@modelcontextprotocol/sdk/package.json")) {
    if (require_all_tiers()) FAIL() << "node or the MCP SDK is missing: run scripts/install-deps";
    GTEST_SKIP() << "node or the MCP SDK is missing: run scripts/install-deps";
  }
  auto r = f->run_program({"/usr/bin/node", dir + "/client.mjs", f->binary(), f->state_dir(), policy, f->workspace()},
                          "", {{"HOME", f->workspace()}}, 120);
  if (r.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE") != std::string::npos && !require_all_tiers()) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  Json out = Json::parse(r.out);
  EXPECT_EQ(out["server"]["name"], "airlock");
  ASSERT_EQ(out["tools"].size(), 9u) << out["tools"].dump();
  EXPECT_EQ(out["tools"][0]["name"], "read_file");
  // The SDK's schema accepts the titles and annotations and hands them to the client.
  EXPECT_EQ(out["tools"][0]["title"], "Read a workspace file");
  EXPECT_EQ(out["tools"][0]["annotations"]["readOnlyHint"], true);
  EXPECT_EQ(out["read"]["content"][0]["text"], "print('hi')\n") << out["read"].dump();
  EXPECT_EQ(out["refused"]["isError"], true);
  std::string why = out["refused"]["content"][0]["text"];
  EXPECT_NE(why.find("AIRLOCK_PATH_DENIED"), std::string::npos) << why;
  EXPECT_NE(why.find("do not try to work around it"), std::string::npos) << why;
  EXPECT_EQ(out["tool"]["structuredContent"]["stdout"], "12 src/app.py\n") << out["tool"].dump();
  EXPECT_EQ(out["unknown"]["code"], -32602) << out["unknown"].dump();
  // A json-protocol tool through the SDK: keyed, ledgered, its result as structured content.
  const Json& deployed = out["deployed"];
  EXPECT_EQ(deployed["isError"], false) << deployed.dump();
  std::string key = deployed["structuredContent"]["idempotency_key"];
  EXPECT_EQ(deployed["structuredContent"]["result"]["request"],
            Json({{"args", {{"v", 1}}}, {"idempotencyKey", key}, {"tool", "deploy"}}));
  EXPECT_NE(deployed["content"][0]["text"].get<std::string>().find(key), std::string::npos) << deployed.dump();
  auto scan = f->run({"ledger", "scan", "--json", deployed["structuredContent"]["ledger"]});
  ASSERT_EQ(scan.status, 0) << scan.err;
  EXPECT_EQ(Json::parse(scan.out)["rows"][0]["key"], key) << scan.out;
  // A tool that needs approval: held (an error result naming the request), approved by the person
  // (`airlock approve`, run by the client script), then dispatched with that approval.
  EXPECT_EQ(out["held"]["isError"], true) << out["held"].dump();
  std::string held = out["held"]["content"][0]["text"];
  EXPECT_NE(held.find("AIRLOCK_APPROVAL_REQUIRED"), std::string::npos) << held;
  EXPECT_NE(held.find("ask the user to approve"), std::string::npos) << held;
  ASSERT_TRUE(out["approval_id"].is_string()) << out.dump();
  EXPECT_EQ(out["approved"]["status"], "approved") << out.dump();
  EXPECT_EQ(out["released"]["isError"], false) << out["released"].dump();
  EXPECT_EQ(out["released"]["structuredContent"]["approval_id"], out["approval_id"]);
  EXPECT_EQ(out["released"]["structuredContent"]["result"], Json({{"released", true}}));
  EXPECT_EQ(out["wrote"]["structuredContent"]["write_back"]["mode"], "on_close") << out["wrote"].dump();
  // The SDK's close ended the session normally (stdin closed, before any signal) and it wrote back.
  EXPECT_LT(out["close_ms"].get<int>(), 2000) << "the SDK had to signal the server";
  EXPECT_EQ(read_text(f->workspace() + "/reports/sdk.txt"), "sdk\n");
  auto files = f->receipts();
  ASSERT_EQ(files.size(), 1u);
  auto close = read_receipts(files[0]).back();
  EXPECT_EQ(close["how"], "closed") << close.dump();
  EXPECT_EQ(close["reason"], "end of input");
  EXPECT_EQ(close["written_back"]["written"], Json::array({"reports/sdk.txt"}));
}

// A client that offers elicitation answers a held call in the client: approved, the call runs
// once (its ledger row joined to the approval); declined, it never runs; cancelled, it stays held.
TEST_F(Mcp, AClientThatElicitsAnswersAHeldCallInTheClient) {
  std::string dir = std::string(AIRLOCK_SOURCE_DIR) + "/tests/mcp-client";
  if (!exists("/usr/bin/node") || !exists(dir + "/node_modules/@modelcontextprotocol/sdk/package.json")) {
    if (require_all_tiers()) FAIL() << "node or the MCP SDK is missing: run scripts/install-deps";
    GTEST_SKIP() << "node or the MCP SDK is missing: run scripts/install-deps";
  }
  auto r = f->run_program({"/usr/bin/node", dir + "/elicit.mjs", f->binary(), f->state_dir(), policy, f->workspace()},
                          "", {{"HOME", f->workspace()}}, 120);
  if (r.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE") != std::string::npos && !require_all_tiers()) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  Json out = Json::parse(r.out);
  ASSERT_EQ(out["asked"].size(), 3u) << out.dump();
  std::string question = out["asked"][0]["message"];
  EXPECT_NE(question.find("\"release\""), std::string::npos) << question;
  EXPECT_NE(question.find("\"v\": 3"), std::string::npos) << question;  // the person sees what runs
  EXPECT_EQ(out["approved"]["isError"], false) << out["approved"].dump();
  EXPECT_EQ(out["approved"]["structuredContent"]["result"], Json({{"released", true}}));
  std::string approval = out["approved"]["structuredContent"]["approval_id"];
  EXPECT_EQ(out["declined"]["isError"], true);
  EXPECT_NE(out["declined"]["content"][0]["text"].get<std::string>().find("denied"), std::string::npos);
  EXPECT_EQ(out["cancelled"]["isError"], true);
  EXPECT_NE(out["cancelled"]["content"][0]["text"].get<std::string>().find("AIRLOCK_APPROVAL_REQUIRED"),
            std::string::npos);
  auto listed = f->run({"approvals", "--all", "--json"});
  ASSERT_EQ(listed.status, 0) << listed.err;
  std::map<std::string, int> statuses;
  Json approvals = Json::parse(listed.out)["approvals"];
  for (const auto& a : approvals) {
    statuses[a["status"]]++;
    if (a["status"] != "pending") {
      EXPECT_EQ(a["answered"]["channel"], "mcp elicitation (the client's user, as the client says)") << a.dump();
    }
  }
  EXPECT_EQ(statuses, (std::map<std::string, int>{{"used", 1}, {"denied", 1}, {"pending", 1}}));
  auto scan = f->run({"ledger", "scan", "--json", f->state_dir() + "/ledgers/mcp-run.jsonl"});
  ASSERT_EQ(scan.status, 0) << scan.err;
  Json rows = Json::parse(scan.out)["rows"];
  ASSERT_EQ(rows.size(), 1u) << scan.out;
  EXPECT_EQ(rows[0]["approval_id"], approval);
}

// Through the SDK without elicitation: held, approved from the command line, run once; another
// argument held again; an expired approval never runs.
TEST_F(Mcp, OfficialSdkCallsAHeldToolOnlyAsApproved) {
  std::string dir = std::string(AIRLOCK_SOURCE_DIR) + "/tests/mcp-client";
  if (!exists("/usr/bin/node") || !exists(dir + "/node_modules/@modelcontextprotocol/sdk/package.json")) {
    if (require_all_tiers()) FAIL() << "node or the MCP SDK is missing: run scripts/install-deps";
    GTEST_SKIP() << "node or the MCP SDK is missing: run scripts/install-deps";
  }
  auto r = f->run_program({"/usr/bin/node", dir + "/approvals.mjs", f->binary(), f->state_dir(), policy,
                           f->workspace()},
                          "", {{"HOME", f->workspace()}}, 120);
  if (r.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE") != std::string::npos && !require_all_tiers()) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  Json out = Json::parse(r.out);
  EXPECT_EQ(out["held"]["isError"], true) << out.dump();
  ASSERT_TRUE(out["held_id"].is_string()) << out.dump();
  EXPECT_EQ(out["approved"]["status"], "approved");
  EXPECT_TRUE(out["changed_id"].is_string()) << "another argument ran under the approval: " << out["changed"].dump();
  EXPECT_NE(out["changed_id"], out["held_id"]);
  EXPECT_EQ(out["ran"]["isError"], false) << out["ran"].dump();
  EXPECT_EQ(out["ran"]["structuredContent"]["approval_id"], out["held_id"]);
  EXPECT_TRUE(out["again_id"].is_string()) << "the approval ran twice: " << out["again"].dump();
  EXPECT_TRUE(out["expired_id"].is_string()) << "an expired approval ran: " << out["expired"].dump();
  EXPECT_NE(out["expired_id"], out["again_id"]);
  auto scan = f->run({"ledger", "scan", "--json", f->state_dir() + "/ledgers/sdk-run.jsonl"});
  Json rows = Json::parse(scan.out)["rows"];
  ASSERT_EQ(rows.size(), 1u) << scan.out;
  EXPECT_EQ(rows[0]["approval_id"], out["held_id"]);
}

// Without the operator's --elicit-approvals a client that offers elicitation is never asked: the
// held call is an error result (an agent's own harness answering elicitation must not approve).
TEST_F(Mcp, AClientIsAskedToApproveOnlyWhenTheOperatorSaysSo) {
  auto p = f->spawn({f->binary(), "--state-dir", f->state_dir(), "mcp", "--policy", policy, "--workspace",
                     f->workspace()});
  ASSERT_TRUE(p->send(rpc(1, "initialize", {{"protocolVersion", "2025-06-18"},
                                            {"capabilities", {{"elicitation", Json::object()}}},
                                            {"clientInfo", {{"name", "test"}, {"version", "1"}}}})));
  ASSERT_TRUE(p->read_line()) << p->err();
  ASSERT_TRUE(p->send(call(2, "release", {{"args", {{"v", 1}}}})));
  auto line = p->read_line();
  ASSERT_TRUE(line) << p->err();
  Json answer = Json::parse(*line);
  if (answer["result"]["content"][0]["text"].get<std::string>().find("AIRLOCK_EXECUTOR_UNAVAILABLE") !=
          std::string::npos &&
      !require_all_tiers())
    GTEST_SKIP() << *line;
  EXPECT_FALSE(answer.contains("method")) << "the client was asked: " << *line;
  EXPECT_EQ(answer["id"], 2) << *line;
  EXPECT_EQ(answer["result"]["isError"], true) << *line;
  EXPECT_NE(answer["result"]["content"][0]["text"].get<std::string>().find("AIRLOCK_APPROVAL_REQUIRED"),
            std::string::npos)
      << *line;
  p->close_stdin();
  EXPECT_EQ(p->wait(), 0) << p->err();
}

// A SIGKILL of `airlock mcp` between intent and outcome: the orphaned intent carries the approval;
// the next server resuming the run retries under the same key (the approval's second attempt).
TEST_F(Mcp, AKilledServerLeavesTheApprovalOnTheOrphanAndTheResumedRunKeepsTheKey) {
  std::string pol = f->write_policy(R"({"schema_version": "airlock.task_policy.v1",
    "tools": [{"name": "release", "protocol": "json", "approval": "required", "env": ["PAY_SECONDS"],
               "argv": ["/bin/sh", "-c", "read line; sleep \"${PAY_SECONDS:-0}\"; echo '{\"released\": true}'"]}]})",
                                    "release.json");
  auto mcp = [&](const std::map<std::string, std::string>& env) {
    auto p = f->spawn({f->binary(), "--state-dir", f->state_dir(), "mcp", "--policy", pol, "--workspace",
                       f->workspace(), "--run-id", "mcp-kill"},
                      env);
    EXPECT_TRUE(p->send(rpc(1, "initialize", {{"protocolVersion", "2025-06-18"}, {"capabilities", Json::object()},
                                              {"clientInfo", {{"name", "test"}, {"version", "1"}}}})));
    auto init = p->read_line();
    EXPECT_TRUE(init) << p->err();
    return p;
  };
  auto p = mcp({{"PAY_SECONDS", "60"}});
  ASSERT_TRUE(p->send(call(2, "release", {{"args", {{"v", 1}}}})));
  auto line = p->read_line();
  ASSERT_TRUE(line) << p->err();
  Json held = Json::parse(*line);
  if (held["result"]["content"][0]["text"].get<std::string>().find("AIRLOCK_EXECUTOR_UNAVAILABLE") != std::string::npos &&
      !require_all_tiers())
    GTEST_SKIP() << *line;
  // A held call is an error result: the request's id is in its text.
  std::string text = held["result"]["content"][0]["text"];
  auto at = text.find("approval request ");
  ASSERT_NE(at, std::string::npos) << text;
  std::string id = text.substr(at + 17, 32);
  ASSERT_EQ(f->run({"approve", id, "--attempts", "2"}).status, 0);
  std::string ledger = f->state_dir() + "/ledgers/mcp-kill.jsonl";
  ASSERT_TRUE(p->send(call(3, "release", {{"args", {{"v", 1}}}})));
  for (int i = 0; i < 600 && read_text(ledger).find(R"("phase":"intent")") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  p->signal(SIGKILL);
  p->wait();
  auto orphaned = Json::parse(f->run({"ledger", "scan", "--json", ledger}).out);
  ASSERT_EQ(orphaned["orphans"].size(), 1u) << orphaned.dump();
  EXPECT_EQ(orphaned["orphans"][0]["approval_id"], id);
  std::string key = orphaned["orphans"][0]["key"];

  auto resumed = mcp({});
  ASSERT_TRUE(resumed->send(call(2, "release", {{"args", {{"v", 1}}}})));
  auto answer = resumed->read_line();
  ASSERT_TRUE(answer) << resumed->err();
  Json ran = Json::parse(*answer);
  EXPECT_EQ(ran["result"]["isError"], false) << ran.dump();
  EXPECT_EQ(ran["result"]["structuredContent"]["idempotency_key"], key);
  EXPECT_EQ(ran["result"]["structuredContent"]["approval_id"], id);
  resumed->close_stdin();
  EXPECT_EQ(resumed->wait(), 0) << resumed->err();
  EXPECT_EQ(f->session_dirs(), 0u);
}

// ---------------------------------------------------------------- how an MCP session ends

// `airlock mcp` driven over live pipes, as an MCP client drives it, as each identity.
class McpShutdown : public ::testing::TestWithParam<Identity> {
 protected:
  void SetUp() override {
    std::string why;
    if (!identity_available(GetParam(), &why)) GTEST_SKIP() << why;
    f = std::make_unique<CliFixture>(GetParam());
    f->put("src/app.py", "print('hi')\n");
  }
  std::string policy(const std::string& extra = "") {
    return f->write_policy(R"({"schema_version": "airlock.task_policy.v1", "readable": ["src", "reports"],
      "write_back_paths": ["reports"], "tools": [{"name": "make", "argv": ["/bin/sh", "-c", "echo made > reports/made.txt"]}]
      )" + extra + "}");
  }
  // Starts `airlock mcp`, initializes, and writes reports/r.txt; false (and a skip) when no
  // executor can run the policy here.
  bool start(const std::string& pol) {
    p = f->spawn({f->binary(), "--state-dir", f->state_dir(), "mcp", "--policy", pol, "--workspace", f->workspace()});
    auto init = ask(rpc(1, "initialize", {{"protocolVersion", "2025-06-18"}, {"capabilities", Json::object()},
                                          {"clientInfo", {{"name", "test"}, {"version", "1"}}}}));
    if (init.is_null()) {
      ADD_FAILURE() << "no answer to initialize; status " << p->wait() << ": " << p->err();
      return false;
    }
    // A session that could not open still answers, with the reason.
    std::string instructions = init["result"].value("instructions", "");
    if (instructions.find("could not start") != std::string::npos) {
      if (instructions.find("AIRLOCK_EXECUTOR_UNAVAILABLE") == std::string::npos || require_all_tiers())
        ADD_FAILURE() << instructions;
      return false;
    }
    written = ask(call(2, "write_file", {{"path", "reports/r.txt"}, {"content", "done\n"}}));
    EXPECT_EQ(written["result"]["isError"], false) << written.dump();
    return true;
  }
  Json ask(const std::string& message) {
    if (!p->send(message)) return nullptr;
    auto line = p->read_line(60);
    return line ? Json::parse(*line) : Json(nullptr);
  }
  std::string session_id() {
    auto files = f->receipts();
    EXPECT_EQ(files.size(), 1u);
    return files.empty() ? "" : std::filesystem::path(files[0]).stem().string();
  }
  std::vector<Json> receipts() {
    auto files = f->receipts();
    EXPECT_EQ(files.size(), 1u);
    return files.empty() ? std::vector<Json>{} : read_receipts(files[0]);
  }
  // The session.close receipt (and that the chain verifies), or null when there is none.
  Json close_receipt() {
    auto rs = receipts();
    auto files = f->receipts();
    if (!files.empty()) {
      EXPECT_EQ(f->run({"receipts", "verify", files[0]}).status, 0);
    }
    return !rs.empty() && rs.back()["kind"] == "session.close" ? rs.back() : Json(nullptr);
  }
  bool landed(const std::string& rel) { return exists(f->workspace() + "/" + rel); }
  // Ends the session with `sig` and checks it closed normally and wrote back, saying which signal.
  void expect_signal_closes(int sig, const std::string& name) {
    ASSERT_FALSE(landed("reports/r.txt"));  // on_close: not before the session closes
    p->signal(sig);
    EXPECT_EQ(p->wait(), 0) << p->err();
    EXPECT_EQ(read_text(f->workspace() + "/reports/r.txt"), "done\n");
    Json close = close_receipt();
    EXPECT_EQ(close["how"], "closed") << close.dump();
    EXPECT_EQ(close["reason"], "signal");
    EXPECT_EQ(close["signal"], name);
    EXPECT_EQ(close["write_back"], true);
    EXPECT_EQ(close["written_back"]["written"], Json::array({"reports/r.txt"})) << close.dump();
    EXPECT_NE(p->err().find("closed (signal " + name + ")"), std::string::npos) << p->err();
  }
  std::unique_ptr<CliFixture> f;
  std::unique_ptr<Spawned> p;
  Json written;
};

TEST_P(McpShutdown, ClosingStdinClosesTheSessionAndWritesBack) {
  if (!start(policy())) GTEST_SKIP() << "no executor for the policy here";
  // What the client saw: the change is in the view and lands at close.
  Json wb = written["result"]["structuredContent"]["write_back"];
  EXPECT_EQ(wb["mode"], "on_close") << written.dump();
  EXPECT_EQ(wb["landed"], false);
  EXPECT_NE(written["result"]["content"][0]["text"].get<std::string>().find("when the session closes normally"),
            std::string::npos);
  p->close_stdin();
  EXPECT_EQ(p->wait(), 0) << p->err();
  EXPECT_EQ(read_text(f->workspace() + "/reports/r.txt"), "done\n");
  Json close = close_receipt();
  EXPECT_EQ(close["how"], "closed") << close.dump();
  EXPECT_EQ(close["reason"], "end of input");
  EXPECT_FALSE(close.contains("signal"));
  EXPECT_EQ(close["written_back"]["written"], Json::array({"reports/r.txt"}));
}

TEST_P(McpShutdown, SigtermIsANormalClose) {
  if (!start(policy())) GTEST_SKIP() << "no executor for the policy here";
  expect_signal_closes(SIGTERM, "SIGTERM");
}

TEST_P(McpShutdown, SighupIsANormalClose) {
  if (!start(policy())) GTEST_SKIP() << "no executor for the policy here";
  expect_signal_closes(SIGHUP, "SIGHUP");
}

// Claude Code ends its MCP servers with SIGINT, then SIGTERM 100 ms later, then SIGKILL.
TEST_P(McpShutdown, SigintIsANormalClose) {
  if (!start(policy())) GTEST_SKIP() << "no executor for the policy here";
  expect_signal_closes(SIGINT, "SIGINT");
}

// A client that signals while a tool runs gets a prompt close: the tool is stopped, what was
// written before lands, and the client's SIGKILL (500 ms later for Claude Code) finds it gone.
TEST_P(McpShutdown, SigtermWhileAToolRunsStopsItAndStillWritesBack) {
  // A duration of this test process's own, so another test running beside it (this one as the
  // other identity) is not taken for this tool.
  std::string secs = std::to_string(100000 + ::getpid());
  std::string tool_cmdline = "/usr/bin/sleep " + secs + " ";
  std::string pol = f->write_policy(R"({"schema_version": "airlock.task_policy.v1", "readable": ["src", "reports"],
      "write_back_paths": ["reports"], "tools": [{"name": "slow", "argv": ["/usr/bin/sleep", ")" + secs +
                                    R"("], "timeout_seconds": 3600}]})");
  if (!start(pol)) GTEST_SKIP() << "no executor for the policy here";
  ASSERT_TRUE(p->send(call(3, "slow", Json::object())));
  auto started = std::chrono::steady_clock::now();
  bool running = false;
  for (int i = 0; i < 600 && !running; ++i) {
    for (const auto& proc : live_processes()) running = running || proc.cmdline == tool_cmdline;
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(running) << "the tool never started";
  auto signalled = std::chrono::steady_clock::now();
  p->signal(SIGTERM);
  EXPECT_EQ(p->wait(), 0) << p->err();
  EXPECT_LT(std::chrono::steady_clock::now() - signalled, std::chrono::seconds(5));
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(60));
  EXPECT_EQ(read_text(f->workspace() + "/reports/r.txt"), "done\n");
  Json close = close_receipt();
  EXPECT_EQ(close["how"], "closed") << close.dump();
  EXPECT_EQ(close["signal"], "SIGTERM");
  for (const auto& proc : live_processes())
    EXPECT_NE(proc.cmdline, tool_cmdline) << "the tool outlived the session";
}

TEST_P(McpShutdown, SigkillWritesNothingBackAndTheNextStartSweeps) {
  if (!start(policy())) GTEST_SKIP() << "no executor for the policy here";
  std::string id = session_id();
  p->signal(SIGKILL);
  EXPECT_EQ(p->wait(), 128 + SIGKILL);
  EXPECT_FALSE(landed("reports/r.txt"));
  EXPECT_TRUE(close_receipt().is_null()) << "a SIGKILLed server records nothing more";
  EXPECT_TRUE(exists(f->state_dir() + "/sessions/" + id + "/view/reports/r.txt"));
  // The next airlock to open a session in this state directory removes what was left.
  auto next = f->run({"mcp", "--policy", policy(), "--workspace", f->workspace()});
  EXPECT_EQ(next.status, 0) << next.err;
  EXPECT_FALSE(exists(f->state_dir() + "/sessions/" + id));
  EXPECT_FALSE(landed("reports/r.txt"));
}

TEST_P(McpShutdown, OperatorKillWritesNothingBack) {
  if (!start(policy())) GTEST_SKIP() << "no executor for the policy here";
  auto killed = f->run({"session", "kill", session_id()});
  EXPECT_EQ(killed.status, 0) << killed.err << killed.out;
  EXPECT_NE(killed.out.find("killed; nothing more is written back"), std::string::npos) << killed.out;
  EXPECT_EQ(p->wait(), 0) << p->err();
  EXPECT_FALSE(landed("reports/r.txt"));
  Json close = close_receipt();
  EXPECT_EQ(close["how"], "killed") << close.dump();
  EXPECT_EQ(close["write_back"], false);
  EXPECT_NE(close["reason"].get<std::string>().find("operator kill (airlock session kill, uid"), std::string::npos);
  // A session that is not running is named as such.
  auto again = f->run({"session", "kill", session_id()});
  EXPECT_EQ(again.status, 125);
  EXPECT_NE(again.err.find("AIRLOCK_SESSION_UNKNOWN"), std::string::npos) << again.err;
  auto bad = f->run({"session", "kill", "../../etc"});
  EXPECT_NE(bad.err.find("AIRLOCK_SESSION_UNKNOWN"), std::string::npos) << bad.err;
}

TEST_P(McpShutdown, AStraySigusr1AsksForNothing) {
  if (!start(policy())) GTEST_SKIP() << "no executor for the policy here";
  p->signal(SIGUSR1);  // no request in the session's directory: not a kill
  Json listed = ask(call(3, "list_dir", {{"path", "reports"}}));
  EXPECT_EQ(listed["result"]["isError"], false) << listed.dump();
  p->close_stdin();
  EXPECT_EQ(p->wait(), 0) << p->err();
  EXPECT_TRUE(landed("reports/r.txt"));
}

TEST_P(McpShutdown, ASpentBudgetIsTheKillSwitch) {
  if (!start(policy(R"(, "limits": {"session_budget_seconds": 2})"))) GTEST_SKIP() << "no executor here";
  // The budget is time: ask until it is spent (two seconds; the bound only ends a failure).
  Json refused;
  for (int i = 3; i < 150; ++i) {
    refused = ask(call(i, "list_dir", {{"path", "reports"}}));
    if (refused["result"]["isError"] == true) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::string text = refused["result"]["content"][0]["text"];
  EXPECT_NE(text.find("AIRLOCK_BUDGET_EXHAUSTED"), std::string::npos) << text;
  EXPECT_NE(text.find("The session has ended"), std::string::npos) << text;
  p->close_stdin();
  EXPECT_EQ(p->wait(), 0) << p->err();
  EXPECT_FALSE(landed("reports/r.txt"));
  Json close = close_receipt();
  EXPECT_EQ(close["how"], "killed") << close.dump();
  EXPECT_EQ(close["reason"], "budget exhausted");
  EXPECT_EQ(close["write_back"], false);
}

TEST_P(McpShutdown, ImmediateWriteBackLandsEachChangeAsItCompletes) {
  if (!start(policy(R"(, "write_back": "immediate")"))) GTEST_SKIP() << "no executor for the policy here";
  // Landed before the answer came back, and the answer says so.
  EXPECT_EQ(read_text(f->workspace() + "/reports/r.txt"), "done\n");
  Json wb = written["result"]["structuredContent"]["write_back"];
  EXPECT_EQ(wb["mode"], "immediate") << written.dump();
  EXPECT_EQ(wb["landed"], true);
  EXPECT_EQ(wb["written_back"]["written"], Json::array({"reports/r.txt"}));
  // A tool's changes land when it completes.
  Json made = ask(call(3, "make", Json::object()));
  EXPECT_EQ(made["result"]["isError"], false) << made.dump();
  EXPECT_EQ(made["result"]["structuredContent"]["write_back"]["written_back"]["written"],
            Json::array({"reports/made.txt"}))
      << made.dump();
  EXPECT_EQ(read_text(f->workspace() + "/reports/made.txt"), "made\n");
  // The same rules: a path the policy does not let it write is refused, and nothing lands.
  Json denied = ask(call(4, "write_file", {{"path", "src/app.py"}, {"content", "x"}}));
  EXPECT_EQ(denied["result"]["isError"], true);
  EXPECT_EQ(read_text(f->workspace() + "/src/app.py"), "print('hi')\n");
  // One write_back receipt for each landing.
  int landings = 0;
  for (const auto& r : receipts())
    if (r["kind"] == "write_back") ++landings;
  EXPECT_EQ(landings, 2);
  // Landed is landed: SIGKILL now loses nothing that was already written.
  p->signal(SIGKILL);
  p->wait();
  EXPECT_TRUE(landed("reports/r.txt"));
  EXPECT_TRUE(landed("reports/made.txt"));
}

TEST_P(McpShutdown, APolicyThatCannotLoadStillAnswersAndSaysWhy) {
  std::string bad = f->write_policy(R"({"schema_version": "airlock.task_policy.v1", "write_back": "at_exit"})");
  p = f->spawn({f->binary(), "--state-dir", f->state_dir(), "mcp", "--policy", bad, "--workspace", f->workspace()});
  Json init = ask(rpc(1, "initialize", {{"protocolVersion", "2025-06-18"}, {"capabilities", Json::object()},
                                        {"clientInfo", {{"name", "test"}, {"version", "1"}}}}));
  ASSERT_FALSE(init.is_null()) << p->err();
  EXPECT_EQ(init["result"]["serverInfo"]["name"], "airlock") << init.dump();
  EXPECT_NE(init["result"]["instructions"].get<std::string>().find("AIRLOCK_POLICY_INVALID"), std::string::npos);
  Json tools = ask(rpc(2, "tools/list"));
  ASSERT_EQ(tools["result"]["tools"].size(), 4u) << tools.dump();
  for (int id : {3, 4}) {
    Json r = ask(call(id, id == 3 ? "read_file" : "write_file", {{"path", "src/app.py"}}));
    EXPECT_EQ(r["result"]["isError"], true) << r.dump();
    std::string text = r["result"]["content"][0]["text"];
    EXPECT_NE(text.find("could not start this session"), std::string::npos) << text;
    EXPECT_NE(text.find("AIRLOCK_POLICY_INVALID"), std::string::npos) << text;
    EXPECT_NE(text.find("$.write_back"), std::string::npos) << text;
  }
  p->close_stdin();
  EXPECT_EQ(p->wait(), 125);
  EXPECT_NE(p->err().find("AIRLOCK_POLICY_INVALID"), std::string::npos) << p->err();
  EXPECT_TRUE(f->receipts().empty());
}

INSTANTIATE_TEST_SUITE_P(AsEachUser, McpShutdown, ::testing::Values(Identity::Self, Identity::Nobody),
                         [](const auto& info) { return to_string(info.param); });

TEST_F(Mcp, ReadmeCodingAgentPolicyIsValid) {
  auto r = f->run({"policy", "check", std::string(AIRLOCK_SOURCE_DIR) + "/examples/policies/coding-agent.json"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("policy ok"), std::string::npos) << r.out;
}

// The refusal text tells the model what else stands in the way only where it is true of this policy
// on this tier: a denied name is absent from the sandbox's view; the host executor confines nothing.
TEST(McpRefusalText, SaysOnlyWhatIsTrueOfThisPolicyOnThisTier) {
  auto pol = policy::builtin_default();
  plan::ExecutionPlan confined;
  confined.confinement = plan::LandlockTierPlan{};
  plan::ExecutionPlan host;
  host.confinement = plan::HostTierPlan{};
  Error denied{Code::PathDenied, "x", {{"path", ".env"}, {"reason", "\".env\" is a denied name"}}};
  Error dotdot{Code::PathDenied, "x", {{"path", "../a"}, {"reason", "\"..\" leaves the directory it names"}}};
  Error prot{Code::PathDenied, "x", {{"path", ".git/config"}, {"reason", "a protected path (.git/config: x)"}}};
  Error egress{Code::EgressDenied, "x", {}};
  EXPECT_NE(server::explain_refusal(denied, pol, confined).find("cannot read it"), std::string::npos);
  EXPECT_NE(server::explain_refusal(prot, pol, confined).find("never lands"), std::string::npos);
  EXPECT_EQ(server::explain_refusal(dotdot, pol, confined).find("cannot read it"), std::string::npos);
  EXPECT_NE(server::explain_refusal(egress, pol, confined).find("no network at all"), std::string::npos);
  EXPECT_EQ(server::explain_refusal(egress, pol, host).find("no network at all"), std::string::npos)
      << "the host executor has the host's network";
  for (const auto* e : {&denied, &dotdot, &prot, &egress})
    EXPECT_EQ(server::explain_refusal(*e, pol, confined).find("refused too"), std::string::npos);
}

}  // namespace
}  // namespace airlock::testing
