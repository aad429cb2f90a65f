// `airlock mcp`: JSON-RPC over stdio, by hand and with the official MCP TypeScript SDK as the client.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_support.h"
#include "server/mcp.h"

namespace airlock::testing {
namespace {

using Json = nlohmann::json;

const char* kPolicy = R"({"schema_version": "airlock.task_policy.v1", "readable": ["src", "reports"],
  "write_back_paths": ["reports"], "egress": [{"host": "docs.python.org", "ports": [443], "schemes": ["https"]}],
  "tools": [{"name": "count", "argv": ["wc", "-c", "src/app.py"]},
            {"name": "grep", "argv": ["grep", "-n"], "allow_args": true}]})";

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
      call(12, "read_file", {{"path", "src/app.py"}, {"action", "write_file"}});
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
  EXPECT_EQ(by_id.size(), 12u) << r.out;  // the notification got no answer
  EXPECT_EQ(by_id[1]["result"]["protocolVersion"], "2025-06-18");
  EXPECT_EQ(by_id[1]["result"]["serverInfo"]["name"], "airlock");
  std::vector<std::string> names;
  for (const auto& t : by_id[2]["result"]["tools"]) {
    names.push_back(t["name"]);
    EXPECT_EQ(t["inputSchema"]["type"], "object") << t.dump();
  }
  EXPECT_EQ(names, (std::vector<std::string>{"read_file", "write_file", "list_dir", "http_fetch", "count", "grep"}));
  EXPECT_TRUE(by_id[2]["result"]["tools"][5]["inputSchema"]["properties"].contains("args"));
  EXPECT_TRUE(by_id[2]["result"]["tools"][4]["inputSchema"]["properties"].empty());

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
  ASSERT_EQ(out["tools"].size(), 6u) << out["tools"].dump();
  EXPECT_EQ(out["tools"][0]["name"], "read_file");
  EXPECT_EQ(out["read"]["content"][0]["text"], "print('hi')\n") << out["read"].dump();
  EXPECT_EQ(out["refused"]["isError"], true);
  std::string why = out["refused"]["content"][0]["text"];
  EXPECT_NE(why.find("AIRLOCK_PATH_DENIED"), std::string::npos) << why;
  EXPECT_NE(why.find("do not try to work around it"), std::string::npos) << why;
  EXPECT_EQ(out["tool"]["structuredContent"]["stdout"], "12 src/app.py\n") << out["tool"].dump();
  EXPECT_EQ(out["unknown"]["code"], -32602) << out["unknown"].dump();
}

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
  confined.executor = policy::ExecutorKind::Landlock;
  plan::ExecutionPlan host;
  host.executor = policy::ExecutorKind::Host;
  host.network = true;
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
