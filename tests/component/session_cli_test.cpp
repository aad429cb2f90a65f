// `airlock session`, `airlock receipts` and `airlock broker-suite` from the command line, as a user types them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <sstream>
#include <thread>

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

// ------------------------------------------------- json-protocol tools: keyed and ledgered in a session

// `deploy` answers with the request line it was given (its arguments and idempotency key), after
// DEPLOY_SECONDS (from airlock's environment) to leave time for a kill between its two records.
const char* kLedgeredPolicy = R"({"schema_version": "airlock.task_policy.v1", "readable": ["src"],
  "tools": [{"name": "deploy", "protocol": "json", "env": ["DEPLOY_SECONDS"], "argv": ["/bin/sh", "-c",
             "read line; sleep \"${DEPLOY_SECONDS:-0}\"; printf '{\"request\": %s}' \"$line\""]},
            {"name": "count", "argv": ["/usr/bin/wc", "-c", "src/app.py"]}]})";

std::vector<std::string> session_argv(CliFixture& f, const std::string& policy, const std::string& run_id) {
  return {f.binary(), "--state-dir", f.state_dir(), "session", "--policy", policy, "--workspace", f.workspace(),
          "--run-id", run_id};
}

TEST_P(SessionCli, AJsonToolIsKeyedAndRecordedBeforeAndAfterItRuns) {
  std::string pol = f->write_policy(kLedgeredPolicy, "ledgered.json");
  auto r = f->run_program(session_argv(*f, pol, "task-42"), R"({"id": 1, "action": "run_tool", "tool": "deploy", "args": {"v": 1}}
{"id": 2, "action": "run_tool", "tool": "deploy", "args": {"v": 1}}
{"id": 3, "action": "run_tool", "tool": "deploy", "args": ["v"]}
{"id": 4, "action": "run_tool", "tool": "count", "args": {"v": 1}}
{"id": 5, "action": "run_tool", "tool": "deploy", "args": {"v": 1}, "step": 0}
{"id": 6, "action": "close"}
)");
  if (refused_for_tier(r) && !require_all_tiers()) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  auto v = lines_of(r.out);
  ASSERT_EQ(v.size(), 7u) << r.out;
  // Each call is a step of the run: the program got its arguments and its key on one line.
  const Json& first = v[1]["result"];
  ASSERT_EQ(v[1]["ok"], true) << v[1].dump();
  std::string key = first["idempotency_key"];
  EXPECT_EQ(key.rfind("ik2-", 0), 0u) << key;
  EXPECT_EQ(first["result"]["request"], Json({{"args", {{"v", 1}}}, {"idempotencyKey", key}, {"tool", "deploy"}}));
  EXPECT_EQ(first["step"], 0);
  EXPECT_EQ(first["run_id"], "task-42");
  std::string ledger = first["ledger"];
  EXPECT_EQ(ledger, f->state_dir() + "/ledgers/task-42.jsonl");
  // The same call at the next step is another effect: another key.
  EXPECT_EQ(v[2]["result"]["step"], 1);
  EXPECT_NE(v[2]["result"]["idempotency_key"], key);
  // Arguments of the other kind are refused before anything is recorded or run.
  EXPECT_EQ(v[3]["error"]["code"], "AIRLOCK_TOOL_ARGS_DENIED") << v[3].dump();
  EXPECT_EQ(v[4]["error"]["code"], "AIRLOCK_TOOL_ARGS_DENIED") << v[4].dump();
  // A call that names its step carries that step's key: the retry of step 0 is recognised.
  EXPECT_EQ(v[5]["result"]["idempotency_key"], key) << v[5].dump();

  // The ledger holds an intent and an outcome for each dispatch, and nothing for the refusals.
  auto scan = f->run({"ledger", "scan", "--json", ledger});
  ASSERT_EQ(scan.status, 0) << scan.err;
  Json s = Json::parse(scan.out);
  EXPECT_EQ(s["lines"], 6);
  ASSERT_EQ(s["rows"].size(), 3u) << scan.out;
  EXPECT_EQ(s["orphans"].size(), 0u);
  EXPECT_EQ(s["rows"][0]["key"], key);
  EXPECT_EQ(s["rows"][0]["span"], "step-0.0");
  EXPECT_EQ(s["rows"][2]["key"], key);
  // The receipts name the run and its ledger at the open, and each call's key.
  auto files = f->receipts();
  ASSERT_EQ(files.size(), 1u);
  auto receipts = read_receipts(files[0]);
  EXPECT_EQ(receipts.front()["run"], Json({{"run_id", "task-42"}, {"ledger", ledger}})) << receipts.front().dump();
  std::vector<std::string> keys;
  for (const auto& j : receipts)
    if (j["kind"] == "run_tool" && j.contains("result") && j["result"].contains("idempotency_key"))
      keys.push_back(j["result"]["idempotency_key"]);
  EXPECT_EQ(keys.size(), 3u);
  EXPECT_EQ(f->run({"receipts", "verify", files[0]}).status, 0);
}

TEST_P(SessionCli, AKillBetweenIntentAndOutcomeLeavesAnOrphanThatTheResumedRunRetriesUnderItsKey) {
  std::string pol = f->write_policy(kLedgeredPolicy, "ledgered.json");
  std::string ledger = f->state_dir() + "/ledgers/r7.jsonl";
  {
    auto p = f->spawn(session_argv(*f, pol, "r7"), {{"DEPLOY_SECONDS", "60"}});
    auto open = p->read_line();
    ASSERT_TRUE(open) << p->err();
    if (Json::parse(*open)["ok"] != true) {
      if (!require_all_tiers()) GTEST_SKIP() << *open;
      FAIL() << *open;
    }
    ASSERT_TRUE(p->send(R"({"id": 1, "action": "run_tool", "tool": "deploy", "args": {"amount": 5}})" "\n"));
    // The intent is on record before the program starts; kill the session while the program runs.
    for (int i = 0; i < 600 && read_text(ledger).find(R"("phase":"intent")") == std::string::npos; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_NE(read_text(ledger).find(R"("phase":"intent")"), std::string::npos) << p->err();
    p->signal(SIGKILL);
    p->wait();
  }
  auto orphaned = Json::parse(f->run({"ledger", "scan", "--json", ledger}).out);
  ASSERT_EQ(orphaned["orphans"].size(), 1u) << orphaned.dump();
  std::string key = orphaned["orphans"][0]["key"];

  // A later session resuming the run retries the orphaned step with the same key; a call past it
  // is a new step.
  auto r = f->run_program(session_argv(*f, pol, "r7"), R"({"id": 1, "action": "run_tool", "tool": "deploy", "args": {"amount": 5}}
{"id": 2, "action": "run_tool", "tool": "deploy", "args": {"amount": 5}}
{"id": 3, "action": "close"}
)");
  ASSERT_EQ(r.status, 0) << r.err;
  auto v = lines_of(r.out);
  ASSERT_EQ(v.size(), 4u) << r.out;
  EXPECT_EQ(v[1]["result"]["idempotency_key"], key) << v[1].dump();
  EXPECT_EQ(v[1]["result"]["step"], 0);
  EXPECT_EQ(v[1]["result"]["result"]["request"]["idempotencyKey"], key);
  EXPECT_NE(v[2]["result"]["idempotency_key"], key);
  auto after = Json::parse(f->run({"ledger", "scan", "--json", ledger}).out);
  EXPECT_EQ(after["orphans"].size(), 1u);  // the record of the attempt that may have happened stays
  ASSERT_EQ(after["rows"].size(), 2u) << after.dump();
  EXPECT_EQ(after["rows"][0]["key"], key);
  EXPECT_EQ(f->session_dirs(), 0u) << "the killed session's sandbox was not swept";
}

// A call stopped before it could end (here the kill switch) may have had its effect: its step is
// unsettled, and the run's next call (resumed elsewhere) retries it under the same key.
TEST_P(SessionCli, ACallStoppedMidwayIsRetriedUnderItsKeyInTheResumedRun) {
  std::string pol = f->write_policy(kLedgeredPolicy, "ledgered.json");
  std::string ledger = f->state_dir() + "/ledgers/r8.jsonl";
  auto p = f->spawn(session_argv(*f, pol, "r8"), {{"DEPLOY_SECONDS", "60"}});
  auto open = p->read_line();
  ASSERT_TRUE(open) << p->err();
  if (Json::parse(*open)["ok"] != true) {
    if (!require_all_tiers()) GTEST_SKIP() << *open;
    FAIL() << *open;
  }
  ASSERT_TRUE(p->send(R"({"id": 1, "action": "run_tool", "tool": "deploy", "args": {"amount": 7}})" "\n"));
  for (int i = 0; i < 600 && read_text(ledger).find(R"("phase":"intent")") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(p->send(R"({"id": 2, "action": "kill"})" "\n"));
  auto stopped = p->read_line();
  ASSERT_TRUE(stopped) << p->err();
  Json s = Json::parse(*stopped);
  EXPECT_EQ(s["error"]["code"], "AIRLOCK_SESSION_KILLED") << *stopped;
  EXPECT_EQ(s["error"]["facts"]["settled"], false) << *stopped;
  std::string key = s["error"]["facts"]["idempotency_key"];
  p->close_stdin();
  p->wait();

  auto r = f->run_program(session_argv(*f, pol, "r8"), R"({"id": 1, "action": "run_tool", "tool": "deploy", "args": {"amount": 7}}
{"id": 2, "action": "run_tool", "tool": "deploy", "args": {"amount": 7}, "step": 9007199254740992}
{"id": 3, "action": "close"}
)");
  auto v = lines_of(r.out);
  ASSERT_EQ(v.size(), 4u) << r.out << r.err;
  EXPECT_EQ(v[1]["result"]["idempotency_key"], key) << v[1].dump();
  EXPECT_EQ(v[1]["result"]["step"], 0);
  // A step past JSON's exact integers could wrap the numbering onto an earlier call's key.
  EXPECT_EQ(v[2]["error"]["code"], "AIRLOCK_OPTION_INVALID") << v[2].dump();
}

// Fresh credentials per dispatch, from the operator's command, handed to that call alone (on
// descriptor 3) and never recorded.
TEST_P(SessionCli, AJsonToolGetsFreshCredentialsThatNoRecordHolds) {
  std::string pol = f->write_policy(R"({"schema_version": "airlock.task_policy.v1",
    "tools": [{"name": "vault", "protocol": "json", "argv": ["/bin/sh", "-c",
               "read line; read -r cred <&3; printf '{\"cred\": \"%s\"}' \"$cred\""]}]})", "vault.json");
  auto argv = session_argv(*f, pol, "cr-run");
  argv.insert(argv.end(), {"--credentials-command", "echo s3cret-$AIRLOCK_TOOL-$AIRLOCK_RUN_ID"});
  auto r = f->run_program(argv, R"({"id": 1, "action": "run_tool", "tool": "vault"}
{"id": 2, "action": "close"}
)");
  if (refused_for_tier(r) && !require_all_tiers()) GTEST_SKIP() << r.err;
  auto v = lines_of(r.out);
  ASSERT_EQ(v.size(), 3u) << r.out << r.err;
  EXPECT_EQ(v[1]["result"]["result"]["cred"], "s3cret-vault-cr-run") << v[1].dump();
  auto files = f->receipts();
  ASSERT_EQ(files.size(), 1u);
  std::string receipts = read_text(files[0]);
  EXPECT_EQ(receipts.find("s3cret"), std::string::npos);
  std::string ledger = read_text(f->state_dir() + "/ledgers/cr-run.jsonl");
  EXPECT_FALSE(ledger.empty());
  EXPECT_EQ(ledger.find("s3cret"), std::string::npos);
}

// An unsettled step waits for its own call: another call in between gets a step of its own, and
// the timed-out call's retry still carries the key it was first handed.
TEST_P(SessionCli, AnUnsettledStepIsKeptForItsOwnRetry) {
  std::string pol = f->write_policy(R"({"schema_version": "airlock.task_policy.v1",
    "tools": [{"name": "t", "protocol": "json", "timeout_seconds": 1, "argv": ["/bin/sh", "-c",
               "read line; case \"$line\" in *slow*) sleep 30;; esac; echo '{}'"]}]})", "t.json");
  auto r = f->run_program(session_argv(*f, pol, "u-run"), R"({"id": 1, "action": "run_tool", "tool": "t", "args": {"x": "slow"}}
{"id": 2, "action": "run_tool", "tool": "t", "args": {"x": "fast"}}
{"id": 3, "action": "run_tool", "tool": "t", "args": {"x": "slow"}}
{"id": 4, "action": "close"}
)");
  if (refused_for_tier(r) && !require_all_tiers()) GTEST_SKIP() << r.err;
  auto v = lines_of(r.out);
  ASSERT_EQ(v.size(), 5u) << r.out << r.err;
  EXPECT_EQ(v[1]["error"]["code"], "AIRLOCK_TOOL_TIMEOUT") << v[1].dump();
  EXPECT_EQ(v[1]["error"]["facts"]["settled"], false);
  std::string key = v[1]["error"]["facts"]["idempotency_key"];
  EXPECT_EQ(v[2]["result"]["step"], 1) << v[2].dump();
  EXPECT_EQ(v[3]["error"]["facts"]["idempotency_key"], key) << v[3].dump();
  EXPECT_EQ(v[3]["error"]["facts"]["step"], 0);
}

// The keying and the ledger are one run: either alone, or either not a regular file, is refused
// rather than numbering from the start again (which would repeat keys already handed out).
TEST_P(SessionCli, ARunMissingHalfOfItsRecordIsRefused) {
  std::string pol = f->write_policy(kLedgeredPolicy, "ledgered.json");
  auto call = [&](const std::string& run) {
    auto r = f->run_program(session_argv(*f, pol, run), R"({"id": 1, "action": "run_tool", "tool": "deploy"}
{"id": 2, "action": "close"}
)");
    auto v = lines_of(r.out);
    return v.size() > 1 ? v[1] : Json{{"out", r.out}, {"err", r.err}};
  };
  Json first = call("half");
  if (first.contains("err") && !require_all_tiers()) GTEST_SKIP() << first.dump();
  ASSERT_EQ(first["ok"], true) << first.dump();
  std::string dir = f->state_dir() + "/ledgers/";
  ASSERT_EQ(::rename((dir + "half.jsonl").c_str(), (dir + "half.jsonl.old").c_str()), 0);
  EXPECT_EQ(call("half")["error"]["code"], "AIRLOCK_LEDGER_CORRUPT");
  ASSERT_EQ(::rename((dir + "half.jsonl.old").c_str(), (dir + "half.jsonl").c_str()), 0);
  ASSERT_EQ(::unlink((dir + "half.run.json").c_str()), 0);
  EXPECT_EQ(call("half")["error"]["code"], "AIRLOCK_LEDGER_CORRUPT");
  // A ledger that is a link to another file is never written through.
  f->put("victim.txt", "untouched");
  ASSERT_EQ(::symlink((f->workspace() + "/victim.txt").c_str(), (dir + "linked.jsonl").c_str()), 0);
  EXPECT_EQ(call("linked")["error"]["code"], "AIRLOCK_LEDGER_CORRUPT");
  EXPECT_EQ(read_text(f->workspace() + "/victim.txt"), "untouched");
}

TEST_P(SessionCli, OneSessionAtATimeWritesARunsLedger) {
  std::string pol = f->write_policy(kLedgeredPolicy, "ledgered.json");
  auto holder = f->spawn(session_argv(*f, pol, "shared"));
  auto open = holder->read_line();
  ASSERT_TRUE(open) << holder->err();
  if (Json::parse(*open)["ok"] != true) {
    if (!require_all_tiers()) GTEST_SKIP() << *open;
    FAIL() << *open;
  }
  ASSERT_TRUE(holder->send(R"({"id": 1, "action": "run_tool", "tool": "deploy"})" "\n"));
  auto held = holder->read_line();
  ASSERT_TRUE(held);
  ASSERT_EQ(Json::parse(*held)["ok"], true) << *held;

  auto r = f->run_program(session_argv(*f, pol, "shared"), R"({"id": 1, "action": "run_tool", "tool": "deploy"}
{"id": 2, "action": "run_tool", "tool": "count"}
{"id": 3, "action": "close"}
)");
  auto v = lines_of(r.out);
  ASSERT_EQ(v.size(), 4u) << r.out << r.err;
  EXPECT_EQ(v[1]["error"]["code"], "AIRLOCK_RUN_IN_USE") << v[1].dump();
  EXPECT_EQ(v[2]["ok"], true);  // the rest of the session is unaffected
  holder->close_stdin();
  EXPECT_EQ(holder->wait(), 0);

  // A run id that could name another file is refused before the session opens.
  auto bad = f->run_program(session_argv(*f, pol, "../escape"), "");
  EXPECT_EQ(bad.status, 125) << bad.out << bad.err;
  EXPECT_NE(bad.out.find("AIRLOCK_OPTION_INVALID"), std::string::npos) << bad.out;
  EXPECT_FALSE(exists(f->state_dir() + "/escape.jsonl"));
}

// ------------------------------------------------- approvals: a call held until a person approves it

const char* kApprovalPolicy = R"({"schema_version": "airlock.task_policy.v1",
  "tools": [{"name": "pay", "protocol": "json", "approval": "required", "env": ["PAY_SECONDS"], "argv": ["/bin/sh", "-c",
             "read line; sleep \"${PAY_SECONDS:-0}\"; printf '{\"paid\": %s}' \"$line\""]}]})";

// One session held open, answered by `airlock approve` and `airlock deny` from the command line.
class Approvals : public SessionCli {
 protected:
  bool open(const std::string& run, const std::map<std::string, std::string>& env = {}) {
    p = f->spawn(session_argv(*f, f->write_policy(kApprovalPolicy, "approval.json"), run), env);
    auto line = p->read_line();
    if (!line) return false;
    opened = Json::parse(*line);
    return opened["ok"] == true;
  }
  Json call(const Json& args) {
    EXPECT_TRUE(p->send(Json{{"id", ++n}, {"action", "run_tool"}, {"tool", "pay"}, {"args", args}}.dump() + "\n"));
    auto line = p->read_line();
    return line ? Json::parse(*line) : Json{{"err", p->err()}};
  }
  std::string held(const Json& answer) {
    EXPECT_EQ(answer["error"]["code"], "AIRLOCK_APPROVAL_REQUIRED") << answer.dump();
    return answer["error"]["facts"].value("approval_id", "");
  }
  CliResult answer(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {f->binary(), "--state-dir", f->state_dir()};
    argv.insert(argv.end(), args.begin(), args.end());
    return f->run_program(argv);
  }
  std::unique_ptr<Spawned> p;
  Json opened;
  int n = 0;
};

TEST_P(Approvals, OnlyTheExactCallApprovedRunsAndOnlyAsOftenAsApproved) {
  if (!open("pay-run")) {
    if (!require_all_tiers()) GTEST_SKIP() << opened.dump() << p->err();
    FAIL() << opened.dump() << p->err();
  }
  // Held, not run: the refusal names the request, the run, the tool and the arguments' digest.
  Json first = call({{"to", "ann"}, {"amount", 5}});
  std::string id = held(first);
  ASSERT_EQ(id.size(), 32u) << first.dump();
  EXPECT_EQ(first["error"]["facts"]["run_id"], "pay-run");
  EXPECT_EQ(first["error"]["facts"]["tool"], "pay");
  EXPECT_EQ(first["error"]["facts"]["args_sha256"].get<std::string>().size(), 64u);
  EXPECT_NE(first["error"]["message"].get<std::string>().find("airlock approve " + id), std::string::npos);
  EXPECT_EQ(held(call({{"to", "ann"}, {"amount", 5}})), id) << "the same call asked twice is one request";
  std::string other = held(call({{"to", "ann"}, {"amount", 6}}));
  EXPECT_NE(other, id);
  auto pending = answer({"approvals", "--json"});
  ASSERT_EQ(pending.status, 0) << pending.err;
  EXPECT_EQ(Json::parse(pending.out)["approvals"].size(), 2u) << pending.out;

  // Approved: exactly that call runs, once; its ledger intent carries the approval.
  auto approved = answer({"approve", id});
  ASSERT_EQ(approved.status, 0) << approved.err;
  EXPECT_EQ(held(call({{"to", "ann"}, {"amount", 6}})), other) << "another argument is not covered";
  Json paid = call({{"amount", 5}, {"to", "ann"}});  // the same arguments in another order: canonical
  ASSERT_EQ(paid["ok"], true) << paid.dump();
  EXPECT_EQ(paid["result"]["approval_id"], id);
  EXPECT_EQ(paid["result"]["result"]["paid"]["args"], Json({{"amount", 5}, {"to", "ann"}}));
  std::string again = held(call({{"to", "ann"}, {"amount", 5}}));
  EXPECT_NE(again, id) << "an approval for one dispatch was used twice";
  EXPECT_NE(answer({"approve", id}).status, 0) << "an approval used up was approved again";

  // Denied: never runs, and the denial holds (no new request to wear a person down). Expired:
  // never runs.
  EXPECT_EQ(answer({"deny", other}).status, 0);
  Json denied = call({{"to", "ann"}, {"amount", 6}});
  EXPECT_EQ(denied["error"]["code"], "AIRLOCK_APPROVAL_DENIED") << denied.dump();
  EXPECT_EQ(denied["error"]["facts"]["approval_id"], other);
  ASSERT_EQ(answer({"approve", again, "--expires-in", "1"}).status, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_NE(held(call({{"to", "ann"}, {"amount", 5}})), again) << "an expired approval let a call run";
  // Two attempts approved: two dispatches, then held again.
  std::string twice = held(call({{"to", "bob"}, {"amount", 1}}));
  ASSERT_EQ(answer({"approve", twice, "--attempts", "2"}).status, 0);
  EXPECT_EQ(call({{"to", "bob"}, {"amount", 1}})["ok"], true);
  EXPECT_EQ(call({{"to", "bob"}, {"amount", 1}})["ok"], true);
  held(call({{"to", "bob"}, {"amount", 1}}));
  // An id that names no request, or is not an id at all, approves nothing.
  EXPECT_NE(answer({"approve", std::string(32, 'a')}).status, 0);
  EXPECT_NE(answer({"approve", "../../etc/passwd"}).status, 0);
  p->close_stdin();
  EXPECT_EQ(p->wait(), 0) << p->err();

  // The ledger: three dispatches, each joined to its approval; nothing ran without one.
  auto scan = answer({"ledger", "scan", "--json", f->state_dir() + "/ledgers/pay-run.jsonl"});
  ASSERT_EQ(scan.status, 0) << scan.err;
  Json rows = Json::parse(scan.out)["rows"];
  ASSERT_EQ(rows.size(), 3u) << scan.out;
  EXPECT_EQ(rows[0]["approval_id"], id);
  EXPECT_EQ(rows[1]["approval_id"], twice);
  EXPECT_EQ(rows[2]["approval_id"], twice);
  // The session's receipts: each request made, each expiry seen; the answers have their own.
  auto files = f->receipts();
  ASSERT_EQ(files.size(), 1u);
  std::map<std::string, int> kinds;
  for (const auto& r : read_receipts(files[0])) kinds[r["kind"]]++;
  EXPECT_EQ(kinds["approval.requested"], 6) << Json(kinds).dump();
  // Receipts carry the arguments' digest, never the arguments.
  for (const auto& r : read_receipts(files[0]))
    if (r.contains("approval")) {
      EXPECT_FALSE(r["approval"].contains("args")) << r.dump();
    }
  EXPECT_EQ(kinds["approval.expired"], 1) << Json(kinds).dump();
  auto all = Json::parse(answer({"approvals", "--all", "--json"}).out)["approvals"];
  std::map<std::string, std::string> status;
  for (const auto& a : all) status[a["id"]] = a["status"];
  EXPECT_EQ(status[id], "used");
  EXPECT_EQ(status[other], "denied");
  EXPECT_EQ(status[again], "expired");
  EXPECT_EQ(status[twice], "used");
}

// An approval is bound to the tool as defined: the same name running another program in the same
// run (a session opened with another policy) is held again.
TEST_P(Approvals, AnApprovalDoesNotCoverAnotherProgramUnderTheSameName) {
  if (!open("same-run")) {
    if (!require_all_tiers()) GTEST_SKIP() << opened.dump() << p->err();
    FAIL() << opened.dump() << p->err();
  }
  std::string id = held(call({{"amount", 2}}));
  ASSERT_EQ(answer({"approve", id}).status, 0);
  p->close_stdin();
  p->wait();
  std::string other = f->write_policy(R"({"schema_version": "airlock.task_policy.v1",
    "tools": [{"name": "pay", "protocol": "json", "approval": "required",
               "argv": ["/bin/sh", "-c", "read line; echo '{\"something_else\": true}'"]}]})", "other.json");
  auto r = f->run_program(session_argv(*f, other, "same-run"),
                          R"({"id": 1, "action": "run_tool", "tool": "pay", "args": {"amount": 2}})" "\n");
  auto v = lines_of(r.out);
  ASSERT_EQ(v.size(), 2u) << r.out << r.err;
  EXPECT_EQ(v[1]["error"]["code"], "AIRLOCK_APPROVAL_REQUIRED") << v[1].dump();
  EXPECT_NE(v[1]["error"]["facts"]["approval_id"], id);
  auto listed = answer({"approvals", "--all"});
  EXPECT_NE(listed.out.find("runs [\"/bin/sh\",\"-c\",\"read line; echo '{\\\"something_else\\\": true}'\"]"),
            std::string::npos)
      << listed.out;
}

// An approval is bound to its run: the same tool and arguments in another run are held.
TEST_P(Approvals, AnApprovalDoesNotCoverAnotherRun) {
  if (!open("run-a")) {
    if (!require_all_tiers()) GTEST_SKIP() << opened.dump() << p->err();
    FAIL() << opened.dump() << p->err();
  }
  std::string id = held(call({{"amount", 1}}));
  ASSERT_EQ(answer({"approve", id}).status, 0);
  auto other = f->run_program(
      session_argv(*f, f->write_policy(kApprovalPolicy, "approval-b.json"), "run-b"),
      R"({"id": 1, "action": "run_tool", "tool": "pay", "args": {"amount": 1}})" "\n");
  auto v = lines_of(other.out);
  ASSERT_EQ(v.size(), 2u) << other.out << other.err;
  EXPECT_EQ(v[1]["error"]["code"], "AIRLOCK_APPROVAL_REQUIRED") << v[1].dump();
  EXPECT_NE(v[1]["error"]["facts"]["approval_id"], id);
  EXPECT_EQ(call({{"amount", 1}})["ok"], true) << "the approved call in its own run";
  p->close_stdin();
  p->wait();
}

// A SIGKILL between intent and outcome: the orphaned intent carries the approval, and the resumed
// run's retry (a second attempt the approval covers) carries the same idempotency key.
TEST_P(Approvals, AKillMidCallLeavesTheApprovalOnTheOrphanAndTheRetryKeepsItsKey) {
  if (!open("k-run", {{"PAY_SECONDS", "60"}})) {
    if (!require_all_tiers()) GTEST_SKIP() << opened.dump() << p->err();
    FAIL() << opened.dump() << p->err();
  }
  std::string id = held(call({{"amount", 42}}));
  ASSERT_EQ(answer({"approve", id, "--attempts", "2"}).status, 0);
  std::string ledger = f->state_dir() + "/ledgers/k-run.jsonl";
  ASSERT_TRUE(p->send(R"({"id": 9, "action": "run_tool", "tool": "pay", "args": {"amount": 42}})" "\n"));
  for (int i = 0; i < 600 && read_text(ledger).find(R"("phase":"intent")") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  p->signal(SIGKILL);
  p->wait();
  auto orphaned = Json::parse(answer({"ledger", "scan", "--json", ledger}).out);
  ASSERT_EQ(orphaned["orphans"].size(), 1u) << orphaned.dump();
  EXPECT_EQ(orphaned["orphans"][0]["approval_id"], id);
  std::string key = orphaned["orphans"][0]["key"];

  auto r = f->run_program(session_argv(*f, f->write_policy(kApprovalPolicy, "approval.json"), "k-run"),
                          R"({"id": 1, "action": "run_tool", "tool": "pay", "args": {"amount": 42}}
{"id": 2, "action": "run_tool", "tool": "pay", "args": {"amount": 42}}
{"id": 3, "action": "close"}
)");
  auto v = lines_of(r.out);
  ASSERT_EQ(v.size(), 4u) << r.out << r.err;
  EXPECT_EQ(v[1]["result"]["idempotency_key"], key) << v[1].dump();
  EXPECT_EQ(v[1]["result"]["approval_id"], id);
  EXPECT_EQ(v[2]["error"]["code"], "AIRLOCK_APPROVAL_REQUIRED") << "two attempts approved, a third ran";
  auto after = Json::parse(answer({"ledger", "scan", "--json", ledger}).out);
  ASSERT_EQ(after["rows"].size(), 1u) << after.dump();
  EXPECT_EQ(after["rows"][0]["approval_id"], id);
  EXPECT_EQ(after["rows"][0]["key"], key);
}

INSTANTIATE_TEST_SUITE_P(Identities, Approvals, ::testing::Values(Identity::Self, Identity::Nobody),
                         [](const auto& info) { return to_string(info.param); });

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
