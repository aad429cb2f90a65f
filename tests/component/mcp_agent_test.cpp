// Real MCP clients through a whole task: Claude Code and Codex (npm) with `airlock mcp` as their
// MCP server under the shipped coding-agent policy, driven offline by tests/agents/scripted_model.py.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "cli_support.h"

namespace airlock::testing {
namespace {

using Json = nlohmann::json;

// What the scripted model has the agent do: look around, read, be refused a denied name, write
// a module, run the declared test tool over it, and finish.
const Json kSteps = Json::array({
    {{"tool", "list_dir"}, {"input", {{"path", "."}}}},
    {{"tool", "read_file"}, {"input", {{"path", "src/app.py"}}}},
    {{"tool", "read_file"}, {"input", {{"path", ".env"}}}},
    {{"tool", "write_file"}, {"input", {{"path", "src/new.py"}, {"content", "def answer():\n    return 42\n"}}}},
    {{"tool", "tests"}, {"input", Json::object()}},
    {{"text", "Wrote src/new.py; the tests pass."}},
});

class McpAgent : public ::testing::TestWithParam<Identity> {
 protected:
  void SetUp() override {
    std::string why;
    if (!identity_available(GetParam(), &why)) GTEST_SKIP() << why;
    const char* d = std::getenv("AIRLOCK_TEST_AGENT_CLIS");
    dir_ = d ? d : "";
    if (dir_.empty() || !exists(dir_ + "/.complete")) {
      why = "the real agent CLIs are not installed (scripts/agent-clis DIR, needs npm and the registry)";
      if (require_all_tiers()) FAIL() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but: " << why;
      GTEST_SKIP() << why;
    }
    f_ = std::make_unique<CliFixture>(GetParam());
    f_->put("src/app.py", "print('hi')\n");
    f_->put(".env", "SECRET=do-not-read\n");
    f_->put("tests/test_new.py",
            "import sys, unittest\nsys.path.insert(0, 'src')\n\n\nclass NewTest(unittest.TestCase):\n"
            "    def test_answer(self):\n        import new\n        self.assertEqual(new.answer(), 42)\n");
    // The policy the README tells people to register, as shipped.
    policy_ = f_->write_policy(read_text(std::string(AIRLOCK_SOURCE_DIR) + "/examples/policies/coding-agent.json"));
    // Not under /tmp: inside the namespaces tier /tmp is the session's scratch directory. Owned
    // by the identity: the agent keeps its settings there, the model server its log.
    home_ = std::make_unique<TempDir>(f_->uid(), "/var/tmp");
    std::ofstream(*home_ / "script.json") << Json{{"steps", kSteps}}.dump();
    ::chmod((*home_ / "script.json").c_str(), 0644);
    model_ = f_->spawn({"/usr/bin/python3", std::string(AIRLOCK_SOURCE_DIR) + "/tests/agents/scripted_model.py",
                        *home_ / "script.json", *home_ / "requests.jsonl"});
    auto line = model_->read_line(30);
    ASSERT_TRUE(line) << "the scripted model server did not start: " << model_->err();
    port_ = Json::parse(*line)["port"];
  }

  std::vector<std::string> airlock_args() const {
    return {"--state-dir", f_->state_dir(), "mcp", "--policy", policy_, "--workspace", f_->workspace()};
  }

  // The requests the agent made of the model, oldest first.
  std::vector<Json> requests() const { return read_receipts(*home_ / "requests.jsonl"); }

  // Whether the agent's last request carried a tool result holding `text` (what the model read).
  bool model_read(const std::string& text) const {
    auto rs = requests();
    return !rs.empty() && rs.back().dump().find(text) != std::string::npos;
  }

  // airlock answered that no executor can enforce the policy here (a skip, unless every tier is required).
  bool no_executor() const {
    return model_read("could not start this session") && model_read("AIRLOCK_EXECUTOR_UNAVAILABLE") &&
           !require_all_tiers();
  }

  // The task's effects, whichever client drove it: the file landed, the denied name was refused
  // by airlock, the test tool ran over the new module, and the session closed normally.
  void expect_task_done(const CliResult& r) {
    EXPECT_EQ(read_text(f_->workspace() + "/src/new.py"), "def answer():\n    return 42\n") << r.err << r.out;
    auto files = f_->receipts();
    ASSERT_EQ(files.size(), 1u) << r.err;
    EXPECT_EQ(f_->run({"receipts", "verify", files[0]}).status, 0);
    auto rs = read_receipts(files[0]);
    ASSERT_FALSE(rs.empty());
    std::map<std::string, int> allowed, refused;
    for (const auto& x : rs) (x.value("decision", "") == "refused" ? refused : allowed)[x["kind"]]++;
    EXPECT_EQ(allowed["list_dir"], 1);
    EXPECT_EQ(allowed["read_file"], 1);
    EXPECT_EQ(refused["read_file"], 1);
    EXPECT_EQ(allowed["write_file"], 1);
    EXPECT_EQ(allowed["run_tool"], 1);
    for (const auto& x : rs) {
      if (x["kind"] == "read_file" && x["decision"] == "refused") {
        EXPECT_EQ(x["error"]["code"], "AIRLOCK_PATH_DENIED") << x.dump();
      }
      if (x["kind"] == "run_tool") {
        EXPECT_EQ(x["result"]["outcome"]["exit_code"], 0) << x.dump();
      }
    }
    const Json& close = rs.back();
    ASSERT_EQ(close["kind"], "session.close") << close.dump();
    EXPECT_EQ(close["how"], "closed") << close.dump();
    EXPECT_EQ(close["write_back"], true);
    // What the tests left (__pycache__) is written back too, under the same rules.
    auto written = close["written_back"]["written"];
    EXPECT_NE(std::find(written.begin(), written.end(), "src/new.py"), written.end()) << close.dump();
    // The model read airlock's refusal, and the test tool's verdict.
    EXPECT_TRUE(model_read("AIRLOCK_PATH_DENIED"));
    auto all = requests();
    ASSERT_FALSE(all.empty());
    std::string last = all.back().dump();
    EXPECT_NE(last.find("Ran 1 test"), std::string::npos) << last.substr(0, 4000);
    std::printf("session.close: how=%s reason=%s signal=%s\n", close.value("how", "").c_str(),
                close.value("reason", "").c_str(), close.value("signal", "").c_str());
  }

  std::string dir_, policy_;
  std::unique_ptr<CliFixture> f_;
  std::unique_ptr<TempDir> home_;
  std::unique_ptr<Spawned> model_;
  int port_ = 0;
};

// Claude Code ends its MCP servers with SIGINT, SIGTERM 100 ms later, then SIGKILL: the
// session must close normally and write back in that time.
TEST_P(McpAgent, ClaudeCodeWritesThroughAirlockAndTheFileLands) {
  Json config = {{"mcpServers", {{"airlock", {{"command", f_->binary()}, {"args", airlock_args()}}}}}};
  std::ofstream(*home_ / "mcp.json") << config.dump();
  ::chmod((*home_ / "mcp.json").c_str(), 0644);
  std::string tools = "mcp__airlock__list_dir,mcp__airlock__read_file,mcp__airlock__write_file,mcp__airlock__tests";
  auto r = f_->run_program({dir_ + "/node_modules/.bin/claude", "-p", "Add src/new.py with answer() returning 42.",
                            "--mcp-config", *home_ / "mcp.json", "--strict-mcp-config", "--allowedTools", tools,
                            "--output-format", "json"},
                           "",
                           {{"HOME", home_->path()},
                            {"ANTHROPIC_BASE_URL", "http://127.0.0.1:" + std::to_string(port_)},
                            {"ANTHROPIC_API_KEY", "sk-ant-scripted"},
                            {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"},
                            {"DISABLE_TELEMETRY", "1"},
                            {"DISABLE_AUTOUPDATER", "1"},
                            {"DISABLE_ERROR_REPORTING", "1"}},
                           240);
  if (no_executor()) GTEST_SKIP() << "no executor for the coding-agent policy here";
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  auto result = Json::parse(r.out);
  EXPECT_EQ(result["result"], "Wrote src/new.py; the tests pass.") << r.out;
  EXPECT_EQ(result["num_turns"], 6) << r.out;
  expect_task_done(r);
}

// Codex ends its MCP servers by closing stdin and sending SIGTERM at once.
TEST_P(McpAgent, CodexWritesThroughAirlockAndTheFileLands) {
  std::string codex_home = *home_ / ".codex";
  std::filesystem::create_directories(codex_home);
  (void)!::chown(codex_home.c_str(), f_->uid(), f_->uid());
  std::string args;
  for (const auto& a : airlock_args()) args += (args.empty() ? "" : ", ") + Json(a).dump();
  std::ofstream(codex_home + "/config.toml")
      << "model = \"scripted-model\"\nmodel_provider = \"scripted\"\napproval_policy = \"never\"\n"
      << "sandbox_mode = \"read-only\"\n\n[model_providers.scripted]\nname = \"scripted\"\n"
      << "base_url = \"http://127.0.0.1:" << port_ << "/v1\"\nwire_api = \"responses\"\nenv_key = \"OPENAI_API_KEY\"\n\n"
      << "[mcp_servers.airlock]\ncommand = " << Json(f_->binary()).dump() << "\nargs = [" << args << "]\n"
      << "default_tools_approval_mode = \"approve\"\n";
  ::chmod((codex_home + "/config.toml").c_str(), 0644);
  auto r = f_->run_program({dir_ + "/node_modules/.bin/codex", "exec", "--skip-git-repo-check",
                            "Add src/new.py with answer() returning 42."},
                           "",
                           {{"HOME", home_->path()}, {"CODEX_HOME", codex_home}, {"OPENAI_API_KEY", "sk-scripted"}},
                           240);
  if (no_executor()) GTEST_SKIP() << "no executor for the coding-agent policy here";
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("Wrote src/new.py; the tests pass."), std::string::npos) << r.out;
  expect_task_done(r);
}

INSTANTIATE_TEST_SUITE_P(AsEachUser, McpAgent, ::testing::Values(Identity::Self, Identity::Nobody),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace airlock::testing
