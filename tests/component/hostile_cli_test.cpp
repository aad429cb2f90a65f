// Hostile bytes (issue 26) through the real binary: every front door (`airlock session`, `mcp`,
// `serve`, `policy check`, `slot set`, `tool call`) answers deep, overflowing, duplicate-keyed and
// non-UTF-8 input with a named refusal, stays up, and records how the session ended.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_support.h"
#include "serve_support.h"

namespace airlock::testing {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

constexpr size_t kDeep = 200000;

std::string open_brackets() { return std::string(kDeep, '['); }
std::string balanced_brackets() { return std::string(kDeep, '[') + std::string(kDeep, ']'); }

// The hostile lines every line protocol is given, each answered on its own: nesting with and
// without its end (the balanced one parses unless bounded, and recursed in whatever printed it),
// deep arguments inside a well-formed request, a byte that is not UTF-8, and 1e400.
std::vector<std::string> hostile_lines(const std::string& deep_request) {
  return {open_brackets(), balanced_brackets(), deep_request, "\xff", "1e400", R"({"id": 9, "n": 1e400})"};
}

// Each line of stdout as JSON: a line that is not is a failure (the peer could not read it).
std::vector<Json> lines_of(const std::string& out) {
  std::vector<Json> v;
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);) {
    if (l.empty()) continue;
    Json j = Json::parse(l, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON: " << l.substr(0, 200);
    v.push_back(std::move(j));
  }
  return v;
}

size_t views_left(const CliFixture& f) {
  size_t n = f.session_dirs();
  return n;
}

bool no_executor(const CliResult& r) {
  return r.status == 125 && r.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE") != std::string::npos;
}

const char* kPolicy = R"({"schema_version": "airlock.task_policy.v1", "readable": ["src", "reports"],
  "write_back_paths": ["reports"],
  "tools": [{"name": "mkname", "argv": ["/bin/sh", "-c", "printf bytes > \"reports/$(printf '\\377')\""]}]})";

class HostileCli : public ::testing::Test {
 protected:
  void SetUp() override {
    f = std::make_unique<CliFixture>(Identity::Self);
    f->put("src/app.py", "print('hi')\n");
    policy = f->write_policy(kPolicy);
  }
  CliResult verb(const std::string& name, const std::string& input) {
    return f->run_program(
        {f->binary(), "--state-dir", f->state_dir(), name, "--policy", policy, "--workspace", f->workspace()},
        input);
  }
  // The session's receipts end with session.close and verify with `airlock receipts verify`.
  void expect_closed_and_verified(const std::string& how) {
    auto files = f->receipts();
    ASSERT_EQ(files.size(), 1u);
    auto rs = read_receipts(files[0]);
    ASSERT_FALSE(rs.empty());
    EXPECT_EQ(rs.back()["kind"], "session.close")
        << rs.back().dump(-1, ' ', false, Json::error_handler_t::replace);
    EXPECT_EQ(rs.back()["how"], how);
    auto v = f->run({"receipts", "verify", files[0]});
    EXPECT_EQ(v.status, 0) << v.out << v.err;
    auto show = f->run({"receipts", "show", "--json", files[0]});
    EXPECT_EQ(show.status, 0) << show.err;
    EXPECT_EQ(views_left(*f), 0u) << "a view was left behind";
  }
  std::unique_ptr<CliFixture> f;
  std::string policy;
};

// (a), (b): the pipe protocol answers each hostile line with AIRLOCK_PROTOCOL_ERROR and goes on.
TEST_F(HostileCli, SessionAnswersEveryHostileLineAndStillCloses) {
  std::string input;
  for (const auto& l :
       hostile_lines(R"({"id": 1, "action": "read_file", "path": )" + balanced_brackets() + "}"))
    input += l + "\n";
  input += R"({"id": 2, "action": "read_file", "path": "src/app.py"})"
           "\n"
           R"({"id": 3, "action": "close"})"
           "\n";
  auto r = verb("session", input);
  if (no_executor(r) && !require_all_tiers()) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.status, 0) << r.err.substr(0, 2000);
  auto v = lines_of(r.out);
  ASSERT_EQ(v.size(), 9u) << r.out.substr(0, 2000);
  EXPECT_EQ(v[0]["event"], "session.open");
  for (size_t i = 1; i <= 6; ++i) {
    EXPECT_EQ(v[i]["ok"], false) << i;
    EXPECT_EQ(v[i]["error"]["code"], "AIRLOCK_PROTOCOL_ERROR") << i << ": " << v[i].dump();
  }
  EXPECT_NE(v[1]["error"]["message"].get<std::string>().find("deeper than"), std::string::npos)
      << v[1].dump();
  EXPECT_NE(v[5]["error"]["message"].get<std::string>().find("too large"), std::string::npos) << v[5].dump();
  EXPECT_EQ(v[7]["result"]["content"], "print('hi')\n") << v[7].dump();
  EXPECT_EQ(v[8]["ok"], true) << v[8].dump();
  expect_closed_and_verified("closed");
}

// A line longer than any request may be is refused by its size without being buffered to its
// end, and the line after it is read as usual; one just short of the limit is answered, and its
// receipt (which holds it) still verifies.
TEST_F(HostileCli, SessionRefusesAnOverlongLineAndReadsTheNext) {
  auto read = [](int id, size_t path_bytes) {
    return "{\"id\": " + std::to_string(id) + ", \"action\": \"read_file\", \"path\": \"" +
           std::string(path_bytes, 'p') + "\"}\n";
  };
  std::string input = read(1, 17u << 20) + read(2, (16u << 20) - 100) +
                      R"({"id": 3, "action": "read_file", "path": "src/app.py"})"
                      "\n"
                      R"({"id": 4, "action": "close"})"
                      "\n";
  auto r = verb("session", input);
  if (no_executor(r) && !require_all_tiers()) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.status, 0) << r.err.substr(0, 2000);
  auto v = lines_of(r.out);
  ASSERT_EQ(v.size(), 5u) << r.out.substr(0, 2000);
  EXPECT_EQ(v[1]["error"]["code"], "AIRLOCK_PROTOCOL_ERROR") << v[1].dump().substr(0, 2000);
  EXPECT_TRUE(v[1]["error"]["facts"].contains("max_bytes")) << v[1].dump().substr(0, 2000);
  EXPECT_EQ(v[2]["id"], 2);
  EXPECT_EQ(v[2]["ok"], false) << v[2].dump().substr(0, 2000);
  EXPECT_EQ(v[3]["id"], 3);
  EXPECT_EQ(v[3]["result"]["content"], "print('hi')\n") << v[3].dump();
  EXPECT_EQ(v[4]["ok"], true) << v[4].dump();
  expect_closed_and_verified("closed");
}

// (a), (b): the MCP server answers each hostile line with a JSON-RPC error, and closes at the end of input.
TEST_F(HostileCli, McpAnswersEveryHostileLineAndStillCloses) {
  std::string deep_call =
      R"({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": )" +
      balanced_brackets() + "}}}";
  std::string input;
  for (const auto& l : hostile_lines(deep_call)) input += l + "\n";
  input += R"({"jsonrpc": "2.0", "id": 2, "method": "ping"})"
           "\n";
  auto r = verb("mcp", input);
  if (no_executor(r) && !require_all_tiers()) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.status, 0) << r.err.substr(0, 2000);
  auto v = lines_of(r.out);
  ASSERT_EQ(v.size(), 7u) << r.out.substr(0, 2000);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(v[i]["error"]["code"], -32700) << i << ": " << v[i].dump();
    EXPECT_TRUE(v[i]["id"].is_null()) << v[i].dump();
  }
  EXPECT_EQ(v[6]["id"], 2);
  EXPECT_TRUE(v[6].contains("result")) << v[6].dump();
  expect_closed_and_verified("closed");
}

// (d): a tool makes a file whose name is not UTF-8; it is listed, written back, and the close
// receipt is written (lossy name, exact bytes beside it) in a chain that verifies.
TEST_F(HostileCli, ANameThatIsNotUtf8IsWrittenBackAndRecorded) {
  auto r = verb("session", R"({"id": 1, "action": "run_tool", "tool": "mkname"}
{"id": 2, "action": "list_dir", "path": "reports"}
{"id": 3, "action": "close"}
)");
  if (no_executor(r) && !require_all_tiers()) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  auto v = lines_of(r.out);
  ASSERT_EQ(v.size(), 4u) << r.out;
  ASSERT_EQ(v[1]["ok"], true) << v[1].dump();
  ASSERT_EQ(v[2]["ok"], true) << v[2].dump();
  ASSERT_EQ(v[3]["ok"], true) << v[3].dump();
  EXPECT_EQ(v[3]["result"]["written_back"]["written"], Json::array({"reports/\xef\xbf\xbd"})) << v[3].dump();
  EXPECT_TRUE(v[3]["result"].contains("not_utf8")) << v[3].dump();
  EXPECT_EQ(read_text(f->workspace() + "/reports/\xff"), "bytes");
  expect_closed_and_verified("closed");
  auto rs = read_receipts(f->receipts()[0]);
  EXPECT_EQ(rs.back()["not_utf8"][0]["base64"], "cmVwb3J0cy//")
      << rs.back().dump();  // base64("reports/\xff")
}

// (a), (c): `policy check` refuses a deep or overflowing policy by name (125), not with a crash
// or an internal error (70).
TEST_F(HostileCli, PolicyCheckRefusesDeepAndOverflowingPoliciesBy125) {
  for (const std::string& text :
       {open_brackets(), balanced_brackets(),
        R"({"schema_version": "airlock.task_policy.v1", "tools": )" + balanced_brackets() + "}",
        std::string(R"({"schema_version": "airlock.task_policy.v1", "limits": {"memory_mb": 1e400}})")}) {
    auto file = f->write_policy(text, "hostile.json");
    auto r = f->run({"policy", "check", "--json", file});
    EXPECT_EQ(r.status, 125) << text.substr(0, 80) << "\n" << r.err.substr(0, 1000);
    Json j = Json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out.substr(0, 1000);
    EXPECT_EQ(j["refused"]["code"], "AIRLOCK_POLICY_INVALID") << j.dump();
  }
}

// (f): a slot name that is not UTF-8 is refused where it enters, so `slot list --json` stays readable.
TEST_F(HostileCli, ASlotNameThatIsNotUtf8IsRefused) {
  for (const std::string& name : {std::string("\xff"),
                                  std::string("a\x01"
                                              "b"),
                                  std::string(200, 's')}) {
    auto r = f->run({"slot", "set", "--json", name});
    EXPECT_EQ(r.status, 125) << r.err;
    Json j = Json::parse(r.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.out;
    EXPECT_EQ(j["refused"]["code"], "AIRLOCK_OPTION_INVALID") << j.dump();
  }
  auto list = f->run({"slot", "list", "--json"});
  EXPECT_EQ(list.status, 0) << list.err;
  auto session = f->run_program({f->binary(), "--state-dir", f->state_dir(), "session", "--policy", policy,
                                 "--workspace", f->workspace(), "--slot", "\xff"},
                                "");
  EXPECT_EQ(session.status, 125) << session.err;
  EXPECT_NE(session.err.find("AIRLOCK_OPTION_INVALID"), std::string::npos) << session.err;
}

// (g): a json tool that prints JSON nested 200,000 deep is a refusal of `tool call`, not a crash.
TEST_F(HostileCli, ToolCallRefusesDeepToolOutput) {
  auto pol = f->write_policy(R"({"schema_version": "airlock.task_policy.v1", "executor": "landlock",
    "tools": [{"name": "deep", "protocol": "json", "argv": ["/bin/sh", "-c",
      "cat >/dev/null; i=0; s='[]'; while [ $i -lt 17 ]; do s=\"$s$s\"; i=$((i+1)); done; printf '%s' \"$s\" | tr -d ']'; printf '%s' \"$s\" | tr -d '['"]}]})",
                             "tool.json");
  auto r = f->run({"tool", "call", "--json", "--policy", pol, "--workspace", f->workspace(), "--ledger",
                   f->state_dir() + "/effects.jsonl", "--tool", "deep"});
  if (no_executor(r) && !require_all_tiers()) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.status, 125) << r.err.substr(0, 2000);
  Json j = Json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out.substr(0, 1000);
  EXPECT_EQ(j["refused"]["code"], "AIRLOCK_PROTOCOL_ERROR") << j.dump();
  EXPECT_NE(j["refused"]["message"].get<std::string>().find("deeper than"), std::string::npos) << j.dump();
  // The dispatch is in the ledger with its outcome, and the ledger reads back.
  auto scan = f->run({"ledger", "scan", "--json", f->state_dir() + "/effects.jsonl"});
  EXPECT_EQ(scan.status, 0) << scan.err;
}

// (a), (c), (e): the HTTP API answers deep, overflowing and duplicate-keyed bodies with 400 and
// AIRLOCK_PROTOCOL_ERROR, on opening a session and on an action, and keeps serving.
TEST(HostileServe, DeepOverflowingAndDuplicateBodiesAre400AndTheServerStaysUp) {
  CliFixture f(Identity::Self);
  f.put("src/app.py", "print('hi')\n");
  ServeProcess srv(f);
  ASSERT_TRUE(srv.ready()) << srv.failure();
  server::HttpClient c(srv.unix_endpoint());
  auto expect_400 = [&](const std::string& path, const std::string& body, const std::string& what) {
    auto r = c.request("POST", path, body);
    EXPECT_TRUE(r) << what << ": " << r.error().message;
    if (!r) return Json();
    EXPECT_EQ(r->status, 400) << what << ": " << r->body.substr(0, 1000);
    EXPECT_EQ(r->json()["error"]["code"], "AIRLOCK_PROTOCOL_ERROR")
        << what << ": " << r->body.substr(0, 1000);
    auto health = c.get("/v1/health");
    EXPECT_TRUE(health && health->status == 200)
        << what << ": the server is gone: " << srv.stderr_text().substr(0, 2000);
    return r->json();
  };
  Json policy = {
      {"schema_version", "airlock.task_policy.v1"}, {"workspace", f.workspace()}, {"readable", {"src"}}};
  std::string text = policy.dump();
  expect_400("/v1/sessions", open_brackets(), "open: [ x 200000");
  expect_400("/v1/sessions", balanced_brackets(), "open: [] x 200000");
  expect_400("/v1/sessions", text.substr(0, text.size() - 1) + R"(, "task_id": )" + balanced_brackets() + "}",
             "open: a deep value");
  expect_400("/v1/sessions", text.substr(0, text.size() - 1) + R"(, "limits": {"memory_mb": 1e400}})",
             "open: 1e400");
  Json dup = expect_400("/v1/sessions", text.substr(0, text.size() - 1) + R"(, "workspace": "/"})",
                        "open: a duplicate key");
  EXPECT_EQ(dup["error"]["facts"]["path"], "$.workspace") << dup.dump();
  expect_400("/v1/sessions", "\xff", "open: not UTF-8");

  auto opened = c.request("POST", "/v1/sessions", text);
  ASSERT_TRUE(opened);
  if (opened->status == 503 && !require_all_tiers()) GTEST_SKIP() << opened->body;
  ASSERT_EQ(opened->status, 201) << opened->body;
  std::string base = "/v1/sessions/" + opened->json()["session"].get<std::string>();
  expect_400(base + "/read_file", open_brackets(), "action: [ x 200000");
  expect_400(base + "/read_file", R"({"path": )" + balanced_brackets() + "}", "action: a deep path");
  expect_400(base + "/read_file", R"({"path": "src/app.py", "length": 1e400})", "action: 1e400");
  expect_400(base + "/read_file", R"({"path": "src/app.py", "path": "/etc/shadow"})",
             "action: a duplicate key");
  expect_400(base + "/read_file", "{\"path\": \"\xff\"}", "action: not UTF-8");
  auto ok = c.post(base + "/read_file", {{"path", "src/app.py"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  auto closed = c.post(base + "/close", Json::object());
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->status, 200) << closed->body;
  auto files = f.receipts();
  ASSERT_EQ(files.size(), 1u);
  auto v = f.run({"receipts", "verify", files[0]});
  EXPECT_EQ(v.status, 0) << v.out << v.err;
  EXPECT_EQ(srv.stop(SIGTERM), 0) << srv.stderr_text().substr(0, 2000);
}

}  // namespace
}  // namespace airlock::testing
