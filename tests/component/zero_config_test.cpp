// Zero configuration through the real binary: `airlock run -- CMD` works on the current directory
// (protected paths apply), the policy is discovered from the repository and the user's config,
// a repository policy that allows more than the user's waits for `airlock policy allow`, and
// `policy show|explain|diff` say where each rule came from and which one decides. One id names a
// run: the session id `run` prints is what `receipts show` and `runs show` take.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_support.h"

namespace airlock::testing {
namespace {

using Json = nlohmann::json;

constexpr const char* kNarrow = R"({"schema_version": "airlock.task_policy.v1", "readable": ["src"],
                                     "write_back_paths": ["src"], "limits": {"memory_mb": 512}})";
constexpr const char* kWide = R"({"schema_version": "airlock.task_policy.v1",
                                   "egress": [{"host": "pypi.org", "ports": [443], "schemes": ["https"]}]})";
constexpr const char* kWider = R"({"schema_version": "airlock.task_policy.v1",
                                    "egress": [{"host": "pypi.org", "ports": [443], "schemes": ["https"]},
                                               {"host": "*", "ports": [443], "schemes": ["https"]}]})";

// A repository in the fixture's workspace: a .git directory and a file in src/.
void make_repository(CliFixture& fx) {
  fx.put(".git/HEAD", "ref: refs/heads/main\n");
  fx.put("src/a.txt", "alpha\n");
  fx.put("top.txt", "top\n");
}

TEST(ZeroConfig, RunWorksOnTheCurrentDirectoryAndWritesBack) {
  CliFixture fx(Identity::Self);
  fx.put("hello.txt", "hi from the workspace\n");
  auto r = fx.run({"run", "-q", "sh", "-c", "cat hello.txt; echo made > made.txt"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "hi from the workspace\n");
  EXPECT_EQ(read_text(fx.workspace() + "/made.txt"), "made\n");
  EXPECT_EQ(fx.session_dirs(), 0u);
}

TEST(ZeroConfig, ACommandCannotPlantARepositoryPolicyForTheNextRun) {
  CliFixture fx(Identity::Self);
  make_repository(fx);
  // None there: one made inside is refused at write-back by name, and nothing else lands.
  std::string plant = std::string("mkdir -p .airlock && printf '%s' '") + kWide + "' > .airlock/policy.json";
  auto made = fx.run({"run", "sh", "-c", plant});
  EXPECT_EQ(made.status, 125) << made.out << made.err;
  EXPECT_NE(made.err.find("AIRLOCK_WRITE_BACK_REFUSED: .airlock"), std::string::npos) << made.err;
  struct stat st{};
  EXPECT_NE(::stat((fx.workspace() + "/.airlock").c_str(), &st), 0) << "the planted policy came back";
  // One there: read-only inside, left as it was.
  constexpr const char* kTight = R"({"schema_version": "airlock.task_policy.v1", "limits": {"memory_mb": 512}})";
  fx.put(".airlock/policy.json", kTight);
  auto over = fx.run({"run", "-q", "sh", "-c", std::string("printf '%s' '") + kWide + "' > .airlock/policy.json"});
  EXPECT_NE(over.status, 0) << over.out << over.err;
  EXPECT_EQ(read_text(fx.workspace() + "/.airlock/policy.json"), kTight);
}

TEST(ZeroConfig, ARepositoryPolicyThatOnlyNarrowsAppliesUnaskedFromAnySubdirectory) {
  CliFixture fx(Identity::Self);
  make_repository(fx);
  fx.put(".airlock/policy.json", kNarrow);
  // Found from the worktree root above the workspace given.
  auto r = fx.run({"run", "--workspace", fx.workspace(), "sh", "-c", "cat src/a.txt; cat top.txt || echo no-top"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "alpha\nno-top\n") << "readable is src only";
  EXPECT_NE(r.err.find("airlock: policy: the repository's " + fx.workspace() + "/.airlock/policy.json"),
            std::string::npos)
      << r.err;
  auto shown = fx.run({"policy", "show", "--json", "--workspace", fx.workspace() + "/src"});
  ASSERT_EQ(shown.status, 0) << shown.err;
  Json j = Json::parse(shown.out);
  EXPECT_EQ(j["policy"]["readable"], Json::array({"src"}));
  EXPECT_EQ(j["sources"]["$.readable"], "repository " + fx.workspace() + "/.airlock/policy.json");
  EXPECT_EQ(j["sources"]["$.limits.memory_mb"], "repository " + fx.workspace() + "/.airlock/policy.json");
  EXPECT_EQ(j["sources"]["$.executor"], "built-in");
  EXPECT_EQ(j["not_allowed"], Json::array());
}

TEST(ZeroConfig, ARepositoryPolicyThatWidensIsRefusedUntilThatVersionIsAllowed) {
  CliFixture fx(Identity::Self);
  make_repository(fx);
  fx.put(".airlock/policy.json", kWide);
  std::string file = fx.workspace() + "/.airlock/policy.json";
  auto refused = fx.run({"run", "--json", "true"});
  EXPECT_EQ(refused.status, 125) << refused.err;
  EXPECT_NE(refused.err.find("airlock: refused: AIRLOCK_POLICY_UNTRUSTED: the repository's policy " + file +
                             " allows more than your own (allows fetches from pypi.org"),
            std::string::npos)
      << refused.err;
  Json why = Json::parse(refused.out);
  EXPECT_EQ(why["refused"]["facts"]["widenings"][0]["field"], "$.egress");
  EXPECT_EQ(fx.receipts().size(), 0u) << "refused before any session opened";

  auto shown = fx.run({"policy", "show"});
  ASSERT_EQ(shown.status, 0) << shown.err;
  EXPECT_NE(shown.out.find("not allowed yet"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("egress: allows fetches from pypi.org"), std::string::npos) << shown.out;

  auto misnamed = fx.run({"policy", "allow", "--policy", file});
  EXPECT_EQ(misnamed.status, 2) << "allow names its file as FILE, not --policy: " << misnamed.err;
  EXPECT_NE(misnamed.err.find("AIRLOCK_OPTION_INVALID"), std::string::npos) << misnamed.err;
  auto allowed = fx.run({"policy", "allow"});
  ASSERT_EQ(allowed.status, 0) << allowed.err;
  EXPECT_NE(allowed.out.find("allowed " + file), std::string::npos) << allowed.out;
  auto ran = fx.run({"run", "-q", "true"});
  EXPECT_EQ(ran.status, 0) << ran.err;

  // Another version is another policy: refused again until allowed again.
  fx.put(".airlock/policy.json", kWider);
  auto again = fx.run({"run", "-q", "true"});
  EXPECT_EQ(again.status, 125) << again.err;
  EXPECT_NE(again.err.find("AIRLOCK_POLICY_UNTRUSTED"), std::string::npos) << again.err;
  // An explicit --policy is the user's choice: no gate.
  auto chosen = fx.run({"run", "-q", "--policy", file, "true"});
  EXPECT_EQ(chosen.status, 0) << chosen.err;
}

// session and tool call discover the layers from the --workspace they are given, gate included.
TEST(ZeroConfig, SessionAndToolCallDiscoverTheRepositorysPolicyFromTheirWorkspace) {
  CliFixture fx(Identity::Self);
  make_repository(fx);
  fx.put(".airlock/policy.json", kNarrow);
  auto s = fx.run_program({fx.binary(), "--state-dir", fx.state_dir(), "session", "--workspace", fx.workspace()},
                          R"({"id":1,"action":"read_file","path":"src/a.txt"})" "\n"
                          R"({"id":2,"action":"read_file","path":"top.txt"})" "\n");
  ASSERT_EQ(s.status, 0) << s.out << s.err;
  std::vector<Json> lines;
  std::istringstream in(s.out);
  for (std::string line; std::getline(in, line);) lines.push_back(Json::parse(line));
  ASSERT_EQ(lines.size(), 3u) << s.out;
  EXPECT_EQ(lines[1]["ok"], true) << s.out;
  EXPECT_EQ(lines[2]["ok"], false) << "readable is src only, as the repository's policy says: " << s.out;

  fx.put(".airlock/policy.json", kWide);
  for (const std::vector<std::string>& verb :
       {std::vector<std::string>{"session", "--workspace", fx.workspace()},
        std::vector<std::string>{"tool", "call", "--workspace", fx.workspace(), "--tool", "x", "--args", "{}",
                                 "--ledger", fx.state_dir() + "/ledger.jsonl", "--run", fx.state_dir() + "/run.json"}}) {
    auto r = fx.run(verb);
    EXPECT_EQ(r.status, 125) << verb[0] << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("AIRLOCK_POLICY_UNTRUSTED"), std::string::npos) << verb[0] << ": " << r.err;
  }
  // Without a workspace nothing is discovered: the built-in default opens.
  auto plain = fx.run_program({fx.binary(), "--state-dir", fx.state_dir(), "session"}, "");
  EXPECT_EQ(plain.status, 0) << plain.out << plain.err;
}

TEST(ZeroConfig, TheUsersPolicyIsTheLayerBelowTheRepositorys) {
  CliFixture fx(Identity::Self);
  make_repository(fx);
  TempDir home;
  ASSERT_EQ(::chmod(home.path().c_str(), 0755), 0);
  std::string config = home.path() + "/.config/airlock";
  std::filesystem::create_directories(config);
  std::ofstream(config + "/policy.json") << kWide;
  fx.put(".airlock/policy.json", kNarrow);
  std::map<std::string, std::string> env = {{"HOME", home.path()}};
  auto shown = fx.run({"policy", "show", "--json"}, env);
  ASSERT_EQ(shown.status, 0) << shown.err;
  Json j = Json::parse(shown.out);
  EXPECT_EQ(j["sources"]["$.egress"], "user " + config + "/policy.json");
  EXPECT_EQ(j["sources"]["$.readable"], "repository " + fx.workspace() + "/.airlock/policy.json");
  EXPECT_EQ(j["not_allowed"], Json::array()) << "it narrows the user's policy: nothing to allow";
  EXPECT_EQ(j["policy"]["egress"][0]["host"], "pypi.org");
  auto ran = fx.run({"run", "true"}, env);
  EXPECT_EQ(ran.status, 0) << ran.err;
  EXPECT_NE(ran.err.find("airlock: policy: the user's " + config + "/policy.json"), std::string::npos) << ran.err;
}

// Red-team findings, each a test.
TEST(ZeroConfig, AHomeDirectoryIsNeverTheWorkspaceUnasked) {
  CliFixture fx(Identity::Self);
  fx.put(".bashrc", "# mine\n");
  auto r = fx.run({"run", "-q", "sh", "-c", "echo evil >> .bashrc"}, {{"HOME", fx.workspace()}});
  EXPECT_EQ(r.status, 125) << r.err;
  EXPECT_NE(r.err.find("AIRLOCK_POLICY_INVALID: the current directory " + fx.workspace() + " holds your home directory"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(read_text(fx.workspace() + "/.bashrc"), "# mine\n");
  // Named, it is the user's choice; the user's own policy stays out of reach.
  auto named = fx.run({"run", "--workspace", fx.workspace(), "sh", "-c",
                       "mkdir -p .config/airlock && echo '{}' > .config/airlock/policy.json"},
                      {{"HOME", fx.workspace()}});
  EXPECT_EQ(named.status, 125) << named.err;
  EXPECT_NE(named.err.find("AIRLOCK_WRITE_BACK_REFUSED: .config/airlock"), std::string::npos) << named.err;
  struct stat st{};
  EXPECT_NE(::stat((fx.workspace() + "/.config/airlock/policy.json").c_str(), &st), 0);
}

TEST(ZeroConfig, ASymlinkedRepositoryPolicyNeverBorrowsAnotherRepositorysTrust) {
  CliFixture fx(Identity::Self);
  TempDir trusted;
  std::filesystem::create_directories(trusted.path() + "/.airlock");
  std::ofstream(trusted.path() + "/.airlock/policy.json") << kWide;
  auto allowed = fx.run({"policy", "allow", trusted.path() + "/.airlock/policy.json"});
  ASSERT_EQ(allowed.status, 0) << allowed.err;
  make_repository(fx);
  ASSERT_EQ(::symlink((trusted.path() + "/.airlock").c_str(), (fx.workspace() + "/.airlock").c_str()), 0);
  auto r = fx.run({"run", "-q", "true"});
  EXPECT_EQ(r.status, 125) << r.err;
  EXPECT_NE(r.err.find("AIRLOCK_POLICY_UNTRUSTED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("without following a symlink"), std::string::npos) << r.err;
}

TEST(ZeroConfig, AGitDirectoryMadeBelowTheRootDoesNotHideTheRepositorysPolicy) {
  CliFixture fx(Identity::Self);
  make_repository(fx);
  fx.put(".airlock/policy.json", R"({"schema_version": "airlock.task_policy.v1", "denied_names": ["secret*"]})");
  fx.put("sub/secret.txt", "S\n");
  auto made = fx.run({"run", "-q", "mkdir", "sub/.git"});
  ASSERT_EQ(made.status, 0) << made.err;
  auto r = fx.run({"run", "-q", "--workspace", fx.workspace() + "/sub", "sh", "-c", "cat secret.txt || echo hidden"});
  EXPECT_EQ(r.out, "hidden\n") << r.err;
}

TEST(OneId, AFileNamedAfterASessionNeverStandsInForItsReceipts) {
  CliFixture fx(Identity::Self);
  auto r = fx.run({"run", "--json", "sh", "-c", ": > \"$AIRLOCK_SESSION\""});
  ASSERT_EQ(r.status, 0) << r.err;
  std::string id = Json::parse(r.out)["session"];
  struct stat st{};
  ASSERT_EQ(::stat((fx.workspace() + "/" + id).c_str(), &st), 0) << "the command wrote its file";
  auto v = fx.run({"receipts", "verify", id});
  ASSERT_EQ(v.status, 0) << v.err;
  EXPECT_EQ(v.out.find("receipts ok: 0 receipt(s)"), std::string::npos) << v.out;
}

TEST(PolicyExplain, NamesTheRuleThatDecidesEachAction) {
  CliFixture fx(Identity::Self);
  make_repository(fx);
  auto explain = [&](std::vector<std::string> words) {
    std::vector<std::string> args = {"policy", "explain"};
    args.insert(args.end(), words.begin(), words.end());
    return fx.run(args);
  };
  auto env = explain({"read_file", ".env"});
  EXPECT_EQ(env.status, 1) << env.err;
  EXPECT_EQ(env.out, "refused: AIRLOCK_PATH_DENIED: .env: \".env\" is a denied name; it is absent from the "
                     "session's view\n");
  auto hook = explain({"write_file", ".git/hooks/pre-commit"});
  EXPECT_EQ(hook.status, 1) << hook.err;
  EXPECT_NE(hook.out.find("refused: AIRLOCK_PATH_DENIED: "), std::string::npos) << hook.out;
  EXPECT_NE(hook.out.find("a protected path (.git"), std::string::npos) << hook.out;
  auto src = explain({"write_file", "src/a.txt"});
  EXPECT_EQ(src.status, 0) << src.out << src.err;
  EXPECT_NE(src.out.find("allowed: src/a.txt is inside the write_back_paths prefix \".\""), std::string::npos)
      << src.out;
  auto fetch = explain({"fetch", "https://pypi.org/simple/"});
  EXPECT_EQ(fetch.status, 1) << fetch.out;
  EXPECT_NE(fetch.out.find("refused: AIRLOCK_EGRESS_DENIED"), std::string::npos) << fetch.out;
  auto push = explain({"run", "git", "push"});
  EXPECT_EQ(push.status, 0) << push.out << push.err;
  EXPECT_NE(push.out.find("code has no network"), std::string::npos) << push.out;

  std::string wide = fx.write_policy(kWide, "wide.json");
  auto allowed = fx.run({"policy", "explain", "--json", "--policy", wide, "fetch", "https://pypi.org/simple/"});
  EXPECT_EQ(allowed.status, 0) << allowed.out << allowed.err;
  Json j = Json::parse(allowed.out);
  EXPECT_EQ(j["allowed"], true);
  EXPECT_NE(j["rule"].get<std::string>().find("egress rule 0"), std::string::npos) << j;
  auto other = fx.run({"policy", "explain", "--policy", wide, "fetch", "https://evil.example/"});
  EXPECT_EQ(other.status, 1) << other.out;

  auto unknown = explain({"delete_everything", "x"});
  EXPECT_NE(unknown.status, 0);
  EXPECT_NE(unknown.err.find("AIRLOCK_OPTION_INVALID"), std::string::npos) << unknown.err;
}

TEST(PolicyDiff, ListsWhatOnePolicyAllowsThatTheOtherDoesNot) {
  CliFixture fx(Identity::Self);
  std::string wide = fx.write_policy(kWider, "wide.json");
  std::string narrow = fx.write_policy(kNarrow, "narrow.json");
  auto d = fx.run({"policy", "diff", wide, narrow});
  EXPECT_EQ(d.status, 1) << d.err;
  EXPECT_NE(d.out.find("egress: allows fetches from pypi.org"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("egress: allows fetches from * ports [443]"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("readable: reads ."), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("limits.memory_mb: 1024 (not 512)"), std::string::npos) << d.out;
  auto back = fx.run({"policy", "diff", "--json", narrow, wide});
  EXPECT_EQ(back.status, 0) << back.out << back.err;
  EXPECT_EQ(Json::parse(back.out)["a_allows_more"], Json::array());
}

TEST(OneId, TheSessionIdRunPrintsIsAcceptedByReceiptsAndRuns) {
  CliFixture fx(Identity::Self);
  auto r = fx.run({"run", "--json", "true"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::string id = Json::parse(r.out)["session"];
  auto shown = fx.run({"receipts", "show", id});
  EXPECT_EQ(shown.status, 0) << shown.err;
  EXPECT_NE(shown.out.find("session.open"), std::string::npos) << shown.out;
  auto verified = fx.run({"receipts", "verify", id});
  EXPECT_EQ(verified.status, 0) << verified.err;
  auto run = fx.run({"runs", "show", "--json", id});
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(Json::parse(run.out)["id"], id);
  auto unknown = fx.run({"receipts", "show", "0123456789abcdef0123456789abcdef"});
  EXPECT_EQ(unknown.status, 125);
  EXPECT_NE(unknown.err.find("AIRLOCK_SESSION_UNKNOWN"), std::string::npos) << unknown.err;
}

}  // namespace
}  // namespace airlock::testing
