// Protected paths and denied names over every confining tier, as root and as uid 65534, through
// `airlock run`: the first wall (a write fails inside), the second (write-back refuses what the
// first was made to miss), a planted hook that never runs on the host, real git inside, and a
// hard link to a file outside the workspace that no route reads.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "../component/cli_support.h"
#include "policy/protected_paths.h"
#include "policy/task_policy.h"

namespace airlock::testing {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

// One concrete file per built-in protected entry (a file beneath it for a directory pattern).
// The test fails when an entry has none, so every entry added to defaults/protected-paths.json
// is proved on every tier.
struct Example {
  std::string pattern;
  bool file_only;
  std::string path;
};
const std::vector<Example> kExamples = {
    {".git", false, ".git/hooks/pre-commit"},
    {".git", false, ".git/config"},
    {".git", false, ".git/commondir"},
    {".git", false, ".git/info/attributes"},
    {".git", false, ".git/modules/lib/hooks/post-checkout"},
    {".git", false, ".git/modules/lib/config"},
    {".git", false, ".git/worktrees/wt/config.worktree"},
    {".git", false, ".git/rebase-merge/git-rebase-todo"},
    {".git", true, "vendor/lib/.git"},
    {".gitmodules", false, ".gitmodules"},
    {".gitattributes", false, "sub/.gitattributes"},
    {".gitconfig", false, ".gitconfig"},
    {".bashrc", false, ".bashrc"},
    {".bash_profile", false, ".bash_profile"},
    {".bash_login", false, "home/.bash_login"},
    {".bash_logout", false, ".bash_logout"},
    {".profile", false, ".profile"},
    {".zshrc", false, ".zshrc"},
    {".zprofile", false, ".zprofile"},
    {".zshenv", false, ".zshenv"},
    {".zlogin", false, ".zlogin"},
    {".envrc", false, "deep/er/.envrc"},
    {".pre-commit-config.yaml", false, ".pre-commit-config.yaml"},
    {"lefthook.yml", false, "sub/lefthook.yml"},
    {".lefthook.yml", false, ".lefthook.yml"},
    {"lefthook-local.yml", false, "lefthook-local.yml"},
    {".husky", false, ".husky/pre-commit"},
    {".hg/hgrc*", false, ".hg/hgrc"},
    {".hg/sharedpath", true, "vendor/.hg/sharedpath"},
    {".hgrc", false, ".hgrc"},
    {".aider.conf.yml", false, ".aider.conf.yml"},
    {".zed", false, ".zed/tasks.json"},
    {".nvim.lua", false, ".nvim.lua"},
    {".nvimrc", false, "sub/.nvimrc"},
    {".exrc", false, ".exrc"},
    {".airlock", false, ".airlock/policy.json"},
    {".config/airlock", false, ".config/airlock/policy.json"},
    {".config/git", false, "home/.config/git/config"},
    {".config/systemd", false, ".config/systemd/user/x.service"},
    {".config/autostart", false, ".config/autostart/x.desktop"},
    {".local/bin", false, ".local/bin/git"},
    {".ssh", false, ".ssh/authorized_keys"},
    {".gnupg", false, ".gnupg/gpg.conf"},
    {".netrc", false, ".netrc"},
    {".npmrc", false, ".npmrc"},
    {".pypirc", false, ".pypirc"},
    {".ripgreprc", false, ".ripgreprc"},
    {".vscode", false, ".vscode/tasks.json"},
    {".idea", false, ".idea/workspace.xml"},
    {".devcontainer", false, ".devcontainer/devcontainer.json"},
    {".claude/settings*.json", false, ".claude/settings.local.json"},
    {".claude/commands", false, ".claude/commands/deploy.md"},
    {".claude/agents", false, ".claude/agents/helper.md"},
    {".claude/hooks", false, ".claude/hooks/on-stop.sh"},
    {".mcp.json", false, "pkg/.mcp.json"},
    {".codex", false, ".codex/config.toml"},
    {".agents", false, ".agents/skills.md"},
    {".gemini", false, ".gemini/settings.json"},
    {".cursor", false, ".cursor/rules/run.mdc"},
};


// Whether a path lies beneath a denied name (absent from the view: no first wall to test there,
// the second wall refuses what the command creates).
bool under_denied(const std::string& rel) {
  std::vector<std::string> denied(std::begin(policy::kDefaultDeniedNames), std::end(policy::kDefaultDeniedNames));
  for (const auto& part : fs::path(rel)) {
    if (policy::is_denied_name(denied, part.string())) return true;
  }
  return false;
}

std::string host_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "<absent>";
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class ProtectedPaths : public ::testing::TestWithParam<std::tuple<Identity, std::string>> {
 protected:
  void SetUp() override {
    std::string why;
    if (!identity_available(identity(), &why)) GTEST_SKIP() << why;
    fx_ = std::make_unique<CliFixture>(identity());
    if (executor() == "microvm") (void)fx_->adopt_vm_verification(&why);
    Json policy = {{"schema_version", "airlock.task_policy.v1"},
                   {"executor", executor()},
                   {"limits", {{"memory_mb", 1024}, {"command_timeout_seconds", 120}}}};
    // The container tier runs the host's programs from an image of links to /usr, bound read-only.
    if (std::string no = executor() == "container" ? fx_->use_usr_image(policy) : ""; !no.empty()) {
      if (require_all_tiers()) FAIL() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but: " << no;
      GTEST_SKIP() << "the container executor is unavailable here: " << no;
    }
    policy_ = fx_->write_policy(policy.dump());
    auto probe = run({"true"});
    if (probe.status != 0) {
      if (require_all_tiers()) FAIL() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but: " << probe.err;
      GTEST_SKIP() << "the " << executor() << " executor is unavailable here: " << probe.err;
    }
  }
  void TearDown() override {
    if (!fx_) return;
    size_t views = fx_->session_dirs();
    EXPECT_EQ(views, 0u) << "session directories are left behind";
  }
  Identity identity() const { return std::get<0>(GetParam()); }
  const std::string& executor() const { return std::get<1>(GetParam()); }

  CliResult run(const std::vector<std::string>& command, const std::map<std::string, std::string>& env = {},
                const std::string& policy = "") {
    std::vector<std::string> a = {"run", "--json", "-q", "--workspace", fx_->workspace()};
    if (!policy.empty() || !policy_.empty()) {
      a.push_back("--policy");
      a.push_back(policy.empty() ? policy_ : policy);
    }
    a.push_back("--");
    a.insert(a.end(), command.begin(), command.end());
    return fx_->run(a, env, 300);
  }
  CliResult sh(const std::string& script, const std::map<std::string, std::string>& env = {}) {
    return run({"/bin/sh", "-c", script}, env);
  }
  // The JSON summary: the last line of stdout.
  static Json summary(const CliResult& r) {
    auto end = r.out.find_last_not_of('\n');
    auto start = r.out.rfind('\n', end);
    Json j = Json::parse(r.out.substr(start == std::string::npos ? 0 : start + 1), nullptr, false);
    if (j.is_discarded()) ADD_FAILURE() << "no JSON summary: " << r.out << "\nstderr: " << r.err;
    return j;
  }
  // Runs git on the host as the identity, in the workspace.
  CliResult host_git(std::vector<std::string> args) {
    std::vector<std::string> argv = {"/usr/bin/git", "-c", "safe.directory=*", "-c", "user.name=host",
                                     "-c", "user.email=host@example.com"};
    argv.insert(argv.end(), args.begin(), args.end());
    return fx_->run_program(argv, "", {{"HOME", fx_->workspace()}, {"GIT_CONFIG_NOSYSTEM", "1"}});
  }
  // The workspace as a git repository with one commit, owned by the identity.
  void make_repo() {
    ASSERT_EQ(host_git({"init", "-q", "-b", "main"}).status, 0);
    fx_->put("app.py", "print('hi')\n");
    ASSERT_EQ(host_git({"add", "app.py"}).status, 0);
    ASSERT_EQ(host_git({"commit", "-q", "-m", "first"}).status, 0);
    if (identity() == Identity::Nobody) {
      std::string cmd = "chown -R 65534:65534 '" + fx_->workspace() + "'";
      ASSERT_EQ(std::system(cmd.c_str()), 0);
    }
  }
  void plant_examples() {
    for (const auto& e : kExamples) fx_->put(e.path, "original " + e.path + "\n");
  }
  std::map<std::string, std::string> snapshot() const {
    std::map<std::string, std::string> s;
    for (const auto& e : kExamples) s[e.path] = host_bytes(fx_->workspace() + "/" + e.path);
    return s;
  }
  // A script that tries every example: append to the file, and make a new file beside it.
  static std::string attack_script() {
    std::string s = "for p in";
    for (const auto& e : kExamples) s += " '" + e.path + "'";
    s += "; do\n"
         "  mkdir -p \"$(dirname \"$p\")\" 2>/dev/null\n"
         "  if (printf planted >> \"$p\") 2>/dev/null; then echo \"WROTE $p\"; else echo \"DENIED $p\"; fi\n"
         "  if (printf planted > \"$p.new\") 2>/dev/null; then echo \"MADE $p.new\"; else echo \"DENIED $p.new\"; fi\n"
         "done\n";
    return s;
  }

  std::unique_ptr<CliFixture> fx_;
  std::string policy_;
};

TEST_P(ProtectedPaths, EveryBuiltInEntryHasAnExample) {
  std::set<std::pair<std::string, bool>> covered;
  for (const auto& e : kExamples) {
    covered.insert({e.pattern, e.file_only});
    auto by = policy::protected_by(policy::default_protected_paths(), e.path, false);
    ASSERT_TRUE(by.has_value()) << e.path << " is not protected";
    EXPECT_EQ(by->pattern, e.pattern) << e.path;
  }
  for (const auto& e : policy::default_protected_paths())
    EXPECT_TRUE(covered.count({e.pattern, e.file_only})) << "no example for the protected entry " << e.pattern;
}

TEST_P(ProtectedPaths, AWriteToAProtectedPathFailsInsideAndNothingLands) {
  plant_examples();
  auto before = snapshot();
  auto r = sh(attack_script());
  // What the command could not see (denied names) it may create, but write-back refuses those.
  std::vector<std::string> wrote;
  std::set<std::string> refused;
  Json j = summary(r);
  for (const auto& e : j["refusals"]) refused.insert(e["facts"].value("path", std::string()));
  for (const auto& ex : kExamples) {
    const std::string& rel = ex.path;
    bool denied = under_denied(rel);
    for (const std::string& p : {rel, rel + ".new"}) {
      bool wrote_it = r.out.find("WROTE " + p + "\n") != std::string::npos ||
                      r.out.find("MADE " + p + "\n") != std::string::npos;
      bool denied_it = r.out.find("DENIED " + p + "\n") != std::string::npos;
      EXPECT_TRUE(wrote_it || denied_it) << p << " was not tried: " << r.out << r.err;
      // The first wall: a protected path that was in the view is read-only, new or old.
      // `.git` as a file protects itself, not a sibling beside it; a plain new `x.new` beside a
      // protected file (not under a protected directory) is no protected path at all.
      bool protected_path = policy::protected_by(policy::default_protected_paths(), p, false).has_value();
      // The first wall covers what the view held (the file) and what is made in a protected
      // directory; a new name in a writable directory (.git/x.new) is the second wall's.
      std::string parent = fs::path(p).parent_path().string();
      bool first_wall = p == rel || policy::protected_by(policy::default_protected_paths(), parent, true).has_value();
      if (!denied && protected_path && first_wall) {
        EXPECT_TRUE(denied_it) << p << " was writable inside on " << executor();
      }
      if (wrote_it && protected_path) {
        EXPECT_TRUE(refused.count(p) || denied) << p << " written and not refused: " << j["refusals"].dump();
      }
    }
  }
  EXPECT_EQ(snapshot(), before) << "a protected file on the host changed";
  for (const auto& ex : kExamples) {
    if (policy::protected_by(policy::default_protected_paths(), ex.path + ".new", false)) {
      EXPECT_FALSE(exists(fx_->workspace() + "/" + ex.path + ".new")) << ex.path << ".new landed on the host";
    }
  }
}

TEST_P(ProtectedPaths, WriteBackRefusesWhatTheFirstWallWasMadeToMiss) {
  plant_examples();
  auto before = snapshot();
  // The test seam takes the first wall away: every write inside succeeds, write-back alone stands.
  auto r = sh(attack_script() + "echo landed > ordinary.txt\n", {{"AIRLOCK_TEST_NO_PROTECTED_FIRST_WALL", "1"}});
  EXPECT_EQ(r.status, 125) << r.out << r.err;
  Json j = summary(r);
  std::set<std::string> refused;
  for (const auto& e : j["refusals"]) {
    EXPECT_EQ(e["code"], "AIRLOCK_WRITE_BACK_REFUSED") << e.dump();
    refused.insert(e["facts"].value("path", std::string()));
  }
  for (const auto& ex : kExamples) {
    const std::string& rel = ex.path;
    if (under_denied(rel)) continue;  // never in the view: the command made a new one (refused below)
    EXPECT_NE(r.out.find("WROTE " + rel + "\n"), std::string::npos) << "the seam left " << rel << " read-only";
    EXPECT_TRUE(refused.count(rel)) << rel << " was not refused by name: " << j["refusals"].dump();
  }
  EXPECT_TRUE(refused.count(".ssh")) << "a denied directory the command made is refused by name";
  EXPECT_EQ(snapshot(), before) << "a protected file on the host changed";
  EXPECT_EQ(host_bytes(fx_->workspace() + "/ordinary.txt"), "landed\n") << "ordinary work still lands";
  bool relaxed = false;
  for (const auto& f : fx_->receipts())
    for (const auto& rec : read_receipts(f))
      if (rec.value("kind", "") == "session.open")
        relaxed = relaxed || rec.dump().find("first wall off (test seam") != std::string::npos;
  EXPECT_TRUE(relaxed) << "the seam is not recorded as a relaxation in session.open";
}

TEST_P(ProtectedPaths, APlantedHookNeverRunsOnTheHost) {
  make_repo();
  if (HasFatalFailure()) return;
  // Where the identity may write on the host and nothing inside the sandbox can reach.
  std::string marker = fx_->state_dir() + "/planted-ran";
  // The attack of the issue: a hook, core.fsmonitor, a shell rc and agent settings, each naming a
  // command that leaves the marker. Every route, whatever succeeds inside.
  std::string payload = "touch " + marker;
  // The repository names its own hooks directory, as husky does.
  ASSERT_EQ(host_git({"config", "core.hooksPath", ".githooks"}).status, 0);
  fx_->put(".githooks/.keep", "");
  auto r = sh("printf '#!/bin/sh\\n" + payload + "\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit;"
              "printf '#!/bin/sh\\n" + payload + "\\n' > .githooks/pre-commit; chmod +x .githooks/pre-commit;"
              "mkdir -p evil/hooks; cp .git/config evil/config; cp -r .git/objects .git/refs evil/;"
              "printf '#!/bin/sh\\n" + payload + "\\n' > evil/hooks/pre-commit; chmod +x evil/hooks/pre-commit;"
              "echo ../evil > .git/commondir;"
              "git config core.fsmonitor '" + payload + "';"
              "printf '" + payload + "\\n' >> .bashrc;"
              "mkdir -p .claude; printf '{\"hooks\":{\"Stop\":[{\"command\":\"" + payload + "\"}]}}' > .claude/settings.json;"
              "echo work > app.py; true");
  EXPECT_TRUE(r.status == 0 || r.status == 125) << r.out << r.err;
  EXPECT_EQ(host_bytes(fx_->workspace() + "/app.py"), "work\n") << "ordinary work lands: " << r.err;
  // Now the user's own git, unconfined, on the host.
  host_git({"status"});
  host_git({"commit", "-qam", "after"});
  EXPECT_FALSE(exists(marker)) << "a command planted inside the sandbox ran on the host";
  EXPECT_FALSE(exists(fx_->workspace() + "/.git/hooks/pre-commit"));
  EXPECT_EQ(host_bytes(fx_->workspace() + "/.git/config").find("fsmonitor"), std::string::npos);
  EXPECT_FALSE(exists(fx_->workspace() + "/.claude/settings.json"));
  EXPECT_FALSE(exists(fx_->workspace() + "/.bashrc"));
  EXPECT_FALSE(exists(fx_->workspace() + "/.githooks/pre-commit"));
  EXPECT_FALSE(exists(fx_->workspace() + "/.git/commondir"));
}

TEST_P(ProtectedPaths, GitCommitsInsideAndTheCommitLands) {
  make_repo();
  if (HasFatalFailure()) return;
  auto r = sh("set -e; export GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=a@example.com "
              "GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=a@example.com;"
              "git log --oneline; echo more >> app.py; echo new > new.txt; git add -A;"
              "git commit -q -m 'made inside the sandbox'; git branch feature; git log --oneline | head -1");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  auto log = host_git({"log", "--format=%s", "main"});
  EXPECT_EQ(log.status, 0) << log.err;
  EXPECT_EQ(log.out, "made inside the sandbox\nfirst\n");
  EXPECT_EQ(host_git({"rev-parse", "--verify", "-q", "feature"}).status, 0) << "the branch made inside is missing";
  auto fsck = host_git({"fsck", "--strict"});
  EXPECT_EQ(fsck.status, 0) << fsck.out << fsck.err;
  EXPECT_EQ(host_git({"status", "--porcelain"}).out, "") << "the host's work tree and index disagree";
}

// The first wall does not stop a rename of .git itself, nor rm -rf of what is not protected: the
// host's repository must come out whole, its history and its configuration both.
TEST_P(ProtectedPaths, AGitDirectoryMovedOrDeletedInsideLeavesTheHostRepositoryWhole) {
  make_repo();
  if (HasFatalFailure()) return;
  auto head = host_git({"rev-parse", "HEAD"});
  ASSERT_EQ(head.status, 0) << head.err;
  for (const char* attack : {"mv .git .git-moved", "rm -rf .git 2>/dev/null; mkdir -p .git; true",
                             "mv .git/objects objects-moved; true", "git init -q . 2>/dev/null; rm -f .git/index; true"}) {
    SCOPED_TRACE(attack);
    auto r = sh(std::string(attack) + "; echo work > app.py");
    EXPECT_TRUE(r.status == 0 || r.status == 125) << r.out << r.err;
    EXPECT_EQ(host_bytes(fx_->workspace() + "/app.py"), "work\n") << "ordinary work lands: " << r.err;
    auto now = host_git({"rev-parse", "HEAD"});
    EXPECT_EQ(now.out, head.out) << now.err;
    auto fsck = host_git({"fsck", "--strict"});
    EXPECT_EQ(fsck.status, 0) << fsck.out << fsck.err;
    EXPECT_TRUE(exists(fx_->workspace() + "/.git/config"));
  }
}

TEST_P(ProtectedPaths, AHardLinkToAFileOutsideIsReadByNoRoute) {
  std::string canary = fs::path(fx_->state_dir()).parent_path().string() + "/canary";
  const std::string secret = "hard-link-canary-5e1f";
  std::ofstream(canary) << secret << "\n";
  ASSERT_EQ(::link(canary.c_str(), (fx_->workspace() + "/linked").c_str()), 0) << std::strerror(errno);
  ASSERT_EQ(::mkfifo((fx_->workspace() + "/pipe").c_str(), 0644), 0) << std::strerror(errno);
  // The command: every read it can make.
  auto r = sh("cat linked; cat ./linked; ls -la; true");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find(secret), std::string::npos) << "the command read the canary";
  // The broker: read_file over the pipe.
  auto s = fx_->run_program({fx_->binary(), "--state-dir", fx_->state_dir(), "session", "--policy", policy_,
                             "--workspace", fx_->workspace()},
                            R"({"id":1,"action":"read_file","path":"linked"})" "\n");
  EXPECT_EQ(s.out.find(secret), std::string::npos) << "read_file returned the canary: " << s.out;
  EXPECT_NE(s.out.find("\"ok\":false"), std::string::npos) << s.out << s.err;
  EXPECT_EQ(host_bytes(canary), secret + "\n");
  // session.open lists what was skipped, and why.
  bool listed = false, fifo = false;
  for (const auto& f : fx_->receipts())
    for (const auto& rec : read_receipts(f)) {
      if (rec.dump().find(R"({"path":"linked","reason":"hard link"})") != std::string::npos) listed = true;
      if (rec.dump().find(R"({"path":"pipe","reason":"fifo"})") != std::string::npos) fifo = true;
    }
  EXPECT_TRUE(listed) << "session.open does not list the skipped hard link";
  EXPECT_TRUE(fifo) << "session.open does not list the skipped fifo";
}

INSTANTIATE_TEST_SUITE_P(
    AsEachUser, ProtectedPaths,
    ::testing::Combine(::testing::Values(Identity::Self, Identity::Nobody),
                       ::testing::Values("landlock", "namespaces", "container", "microvm")),
    [](const auto& info) { return to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param); });

}  // namespace
}  // namespace airlock::testing
