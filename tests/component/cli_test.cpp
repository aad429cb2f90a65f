// The read-only verbs through the real binary: policy check, plan, doctor, and run --json.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/fs.h"
#include "cli_support.h"

namespace airlock::testing {
namespace {

using Json = nlohmann::json;

TEST(CliPolicyCheck, PrintsTheEffectivePolicyAndItsDigest) {
  CliFixture fx(Identity::Self);
  auto pol = fx.write_policy(R"({"schema_version": "airlock.task_policy.v1", "task_id": "t-1"})");
  auto r = fx.run({"policy", "check", "--json", pol});
  ASSERT_EQ(r.status, 0) << r.err;
  Json j = Json::parse(r.out);
  EXPECT_EQ(j["policy"]["task_id"], "t-1");
  EXPECT_EQ(j["policy"]["schema_version"], "airlock.task_policy.v1");
  EXPECT_EQ(j["digest"].get<std::string>().size(), 64u);
}

// Every policy under examples/policies/ loads and plans on this host (the agent policies name the
// namespaces tier and a door to their model host).
TEST(CliPolicyCheck, EveryExamplePolicyLoadsAndPlans) {
  CliFixture fx(Identity::Self);
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(AIRLOCK_SOURCE_DIR) + "/examples/policies")) {
    SCOPED_TRACE(e.path().string());
    ++n;
    auto r = fx.run({"policy", "check", "--json", e.path().string()});
    ASSERT_EQ(r.status, 0) << r.err;
    auto plan = fx.run({"plan", "--policy", e.path().string()});
    if (plan.status == 125 && plan.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE") != std::string::npos && !require_all_tiers())
      continue;
    EXPECT_EQ(plan.status, 0) << plan.err;
  }
  EXPECT_GE(n, 4);
}

TEST(CliPolicyCheck, RefusesAnUnknownSchemaVersionWith125) {
  CliFixture fx(Identity::Self);
  auto pol = fx.write_policy(R"({"schema_version": "airlock.task_policy.v2"})");
  auto r = fx.run({"policy", "check", "--json", pol});
  EXPECT_EQ(r.status, 125);
  Json j = Json::parse(r.out);
  EXPECT_EQ(j["refused"]["code"], "AIRLOCK_POLICY_INVALID");
  EXPECT_EQ(j["refused"]["facts"]["path"], "$.schema_version");
  EXPECT_NE(r.err.find("airlock: refused: AIRLOCK_POLICY_INVALID"), std::string::npos);
}

TEST(CliPlan, PlansForGivenHostFactsWithoutProbing) {
  CliFixture fx(Identity::Self);
  auto pol = fx.write_policy(R"({"schema_version": "airlock.task_policy.v1", "executor": "landlock"})");
  auto facts = fx.write_policy(R"({"kernel_release": "synthetic", "landlock_abi": 2, "seccomp_filter": true,
                                   "no_new_privs": true})",
                               "facts.json");
  auto r = fx.run({"plan", "--json", "--policy", pol, "--facts", facts});
  EXPECT_EQ(r.status, 125);
  EXPECT_EQ(Json::parse(r.out)["refused"]["code"], "AIRLOCK_CONFINEMENT_BELOW_FLOOR");
  EXPECT_NE(r.err.find("Landlock ABI 2"), std::string::npos) << r.err;
}

TEST(CliPlan, PrintsThePlanItWouldRun) {
  CliFixture fx(Identity::Self);
  auto pol = fx.write_policy(R"({"schema_version": "airlock.task_policy.v1", "executor": "landlock"})");
  auto facts = fx.write_policy(R"({"kernel_release": "synthetic", "landlock_abi": 6, "seccomp_filter": true,
                                   "no_new_privs": true})",
                               "facts.json");
  auto r = fx.run({"plan", "--json", "--policy", pol, "--facts", facts});
  ASSERT_EQ(r.status, 0) << r.err;
  Json j = Json::parse(r.out);
  EXPECT_EQ(j["executor"], "landlock");
  EXPECT_EQ(j["landlock"]["abi_measured"], 6);
  EXPECT_TRUE(j["landlock"]["scope_signal"].get<bool>());
  EXPECT_EQ(j["limits"]["process_mechanism"], "rlimit_nproc");
}

// `plan` plans as a session would: that repository's own hooksPath is protected, whether the
// workspace is named or is the current directory (as `airlock run` takes it); another is not.
TEST(CliPlan, PlansTheWorkspacesGitConfigTargetsAsRunWould) {
  CliFixture fx(Identity::Self);
  fx.put(".git/config", "[core]\n\thooksPath = .githooks\n");
  auto pol = fx.write_policy(R"({"schema_version": "airlock.task_policy.v1", "executor": "landlock"})");
  auto facts = fx.write_policy(R"({"kernel_release": "synthetic", "landlock_abi": 6, "seccomp_filter": true,
                                   "no_new_privs": true})",
                               "facts.json");
  auto with = fx.run({"plan", "--json", "--policy", pol, "--facts", facts, "--workspace", fx.workspace()});
  ASSERT_EQ(with.status, 0) << with.err;
  auto here = fx.run({"plan", "--json", "--policy", pol, "--facts", facts});
  ASSERT_EQ(here.status, 0) << here.err;
  TempDir elsewhere;
  auto without = fx.run({"plan", "--json", "--policy", pol, "--facts", facts, "--workspace", elsewhere.path()});
  ASSERT_EQ(without.status, 0) << without.err;
  EXPECT_NE(with.out.find("\".githooks\""), std::string::npos) << with.out;
  EXPECT_NE(here.out.find("\".githooks\""), std::string::npos) << here.out;
  EXPECT_EQ(without.out.find("\".githooks\""), std::string::npos) << without.out;
}

TEST(CliDoctor, ReportsEveryExecutorWithAReason) {
  CliFixture fx(Identity::Self);
  auto r = fx.run({"doctor", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  Json j = Json::parse(r.out);
  // Every tier this build implements (the executor registry), in order of isolation.
  std::vector<std::string> listed;
  for (const auto& e : j["executors"]) {
    EXPECT_FALSE(e["reason"].get<std::string>().empty()) << e.dump();
    listed.push_back(e["executor"].get<std::string>());
  }
  EXPECT_EQ(listed, (std::vector<std::string>{"host", "landlock", "namespaces", "container", "microvm"}));
  EXPECT_TRUE(j["host_facts"].contains("landlock_abi"));
  EXPECT_EQ(j["scenarios"].size(), 4u);
  auto text = fx.run({"doctor"});
  EXPECT_NE(text.out.find("EXECUTOR"), std::string::npos);
  EXPECT_NE(text.out.find("the built-in default policy"), std::string::npos);
}

TEST(CliDoctor, PlanAndDoctorListTheProtectedPathsInForceAndEachRelaxation) {
  CliFixture fx(Identity::Self);
  auto d = fx.run({"doctor", "--json"});
  ASSERT_EQ(d.status, 0) << d.err;
  Json j = Json::parse(d.out);
  ASSERT_TRUE(j["protected_paths"].is_array());
  EXPECT_NE(std::find(j["protected_paths"].begin(), j["protected_paths"].end(), ".bashrc"),
            j["protected_paths"].end()) << j["protected_paths"].dump();
  EXPECT_EQ(j["protected_paths"][0]["pattern"], ".git") << j["protected_paths"].dump();
  EXPECT_TRUE(j["protected_paths"][0]["except"].is_array()) << j["protected_paths"].dump();
  EXPECT_NE(fx.run({"doctor"}).out.find("protected paths, built in"), std::string::npos);
  auto pol = fx.write_policy(R"({"schema_version": "airlock.task_policy.v1", "protected_paths": ["deploy/"],
                                 "writable_protected_paths": [".vscode"]})");
  auto p = fx.run({"plan", "--policy", pol});
  ASSERT_EQ(p.status, 0) << p.err;
  EXPECT_NE(p.out.find("protected  .git (all but objects"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find(", deploy"), std::string::npos) << p.out;
  EXPECT_EQ(p.out.find(".vscode,"), std::string::npos) << "a relaxed entry is not in force: " << p.out;
  EXPECT_NE(p.out.find("relaxed    writable_protected_paths: .vscode"), std::string::npos) << p.out;
}

// The design's rule: `airlock ledger scan` over several ledgers (one per worker) gives one
// report, each orphaned intent attributed to its file.
TEST(CliLedgerScan, SeveralLedgersMakeOneReportWithOrphansAttributedToTheirFile) {
  CliFixture fx(Identity::Self);
  auto intent = [](const std::string& attempt, const std::string& key) {
    return R"({"phase":"intent","attempt_id":")" + attempt + R"(","key":")" + key +
           R"(","tool":"pay","args_hash":"h","run_id":"r","span":"s","workdir":"/w","started_at":1})" + "\n";
  };
  auto outcome = [](const std::string& attempt, const std::string& key) {
    return R"({"phase":"outcome","attempt_id":")" + attempt + R"(","key":")" + key +
           R"(","status":"ok","error":null,"finished_at":2,"wall_ms":1})" + "\n";
  };
  std::string a = fx.state_dir() + "/worker-a.jsonl", b = fx.state_dir() + "/worker-b.jsonl";
  ASSERT_TRUE(write_file_atomic(a, intent("a1", "ik2-a") + outcome("a1", "ik2-a") + intent("a2", "ik2-x")));
  ASSERT_TRUE(write_file_atomic(b, intent("b1", "ik2-b")));
  ::chmod(a.c_str(), 0644);
  ::chmod(b.c_str(), 0644);
  auto r = fx.run({"ledger", "scan", "--json", a, b});
  ASSERT_EQ(r.status, 0) << r.err;
  Json j = Json::parse(r.out);
  ASSERT_EQ(j["ledgers"].size(), 2u);
  EXPECT_EQ(j["ledgers"][0]["file"], a);
  EXPECT_EQ(j["totals"]["rows"], 1);
  ASSERT_EQ(j["orphans"].size(), 2u);
  EXPECT_EQ(j["orphans"][0]["file"], a);
  EXPECT_EQ(j["orphans"][0]["attempt_id"], "a2");
  EXPECT_EQ(j["orphans"][1]["file"], b);
  EXPECT_EQ(j["orphans"][1]["attempt_id"], "b1");
  auto text = fx.run({"ledger", "scan", a, b});
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("2 ledgers: 1 row(s), 2 orphaned intent(s)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("orphan " + b + " line 1"), std::string::npos) << text.out;
  // One ledger alone keeps the single-ledger report.
  auto one = fx.run({"ledger", "scan", "--json", b});
  ASSERT_EQ(one.status, 0) << one.err;
  EXPECT_FALSE(Json::parse(one.out).contains("ledgers"));
}

TEST(CliRun, JsonSummaryIsTheLastLineOfStdout) {
  CliFixture fx(Identity::Self);
  fx.put("src/a.txt", "a\n");
  auto pol = fx.write_policy(R"({"schema_version": "airlock.task_policy.v1", "executor": "landlock",
                                 "readable": ["src"], "write_back_paths": ["out"]})");
  auto r = fx.run({"run", "--json", "--policy", pol, "--workspace", fx.workspace(), "--", "/bin/sh", "-c",
                   "cat src/a.txt; echo b > out/b.txt"});
  if (r.status == 125 && r.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE") != std::string::npos && !require_all_tiers())
    GTEST_SKIP() << "the landlock tier is unavailable here: " << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  auto last = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  EXPECT_EQ(r.out.substr(0, 2), "a\n");
  Json j = Json::parse(last);
  EXPECT_EQ(j["executor"], "landlock");
  EXPECT_EQ(j["outcome"]["status"], 0);
  EXPECT_EQ(j["written_back"]["written"], Json::array({"out/b.txt"}));
  EXPECT_TRUE(j["refusals"].empty());
  EXPECT_EQ(read_text(fx.workspace() + "/out/b.txt"), "b\n");
}

// The Landlock tier has no /proc of its own: each command reads its own /proc/<pid> (a runtime such
// as JavaScriptCore stops without /proc/self/maps), never another process's, nor a child's.
TEST(CliRun, OnTheLandlockTierACommandReadsItsOwnProcAndNoOneElses) {
  CliFixture fx(Identity::Self);
  auto pol = fx.write_policy(R"({"schema_version": "airlock.task_policy.v1", "executor": "landlock"})");
  TempDir outside(std::nullopt, "/var/tmp");
  ::chmod(outside.path().c_str(), 0755);
  std::ofstream(outside / "host.txt") << "host\n";
  auto r = fx.run({"run", "--policy", pol, "--workspace", fx.workspace(), "--", "/bin/sh", "-c",
                   // The shell itself reads (a builtin's redirection), so /proc/self is the command's.
                   "read l < /proc/self/maps && echo own-ok; "
                   "{ read l < /proc/$PPID/environ; } 2>/dev/null || echo parent-denied; "
                   "{ read l < /proc/1/status; } 2>/dev/null || echo init-denied; "
                   "sleep 30 & c=$!; { read l < /proc/$c/status; } 2>/dev/null || echo child-denied; kill $c; "
                   "{ read l < " + outside / "host.txt" + "; } 2>/dev/null || echo host-denied; "
                   "{ read l < /proc/self/root" + outside / "host.txt" + "; } 2>/dev/null || echo root-link-denied"});
  if (r.status == 125 && r.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE") != std::string::npos && !require_all_tiers())
    GTEST_SKIP() << "the landlock tier is unavailable here: " << r.err;
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "own-ok\nparent-denied\ninit-denied\nchild-denied\nhost-denied\nroot-link-denied\n") << r.err;
}

// The state directory holds the receipts, the run store and the per-boot host facts the planner
// reads: a workspace that contains it (so a command could write them back) is refused by name,
// and nothing runs.
TEST(CliRun, AWorkspaceHoldingTheStateDirectoryIsRefused) {
  CliFixture fx(Identity::Self);
  const std::string parent = fx.state_dir().substr(0, fx.state_dir().rfind('/'));
  for (const std::string& ws : {fx.state_dir(), parent}) {
    auto r = fx.run({"run", "--workspace", ws, "--", "/bin/sh", "-c", "echo ran"});
    EXPECT_EQ(r.status, 125) << ws << ": " << r.err;
    EXPECT_NE(r.err.find("AIRLOCK_POLICY_INVALID"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("holds airlock's state directory"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("ran"), std::string::npos) << r.out;
  }
  // A workspace beside it is fine.
  auto ok = fx.run({"run", "--workspace", fx.workspace(), "--", "/bin/sh", "-c", "echo ran"});
  if (ok.status == 125 && ok.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE") != std::string::npos && !require_all_tiers())
    GTEST_SKIP() << ok.err;
  EXPECT_EQ(ok.status, 0) << ok.err;
}

// Named AIRLOCK_TOOL_FAILED on stderr, and 127 as a shell exits for a command it cannot find
// (cli_conventions_test.cpp has 126 and both tiers).
TEST(CliRun, UnknownCommandIsAToolFailureThatExits127) {
  CliFixture fx(Identity::Self);
  auto r = fx.run({"run", "--", "no-such-program-xyz"});
  EXPECT_EQ(r.status, 127);
  EXPECT_NE(r.err.find("AIRLOCK_TOOL_FAILED"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace airlock::testing
