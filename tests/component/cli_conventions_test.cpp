// The command-line conventions through the real binary, one by one: --version, the command after
// the first positional, unknown flags named, global flags after the verb, 126/127 for a command
// that cannot start, and --json output a reader can split into lines.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "base/hash.h"
#include "cli_support.h"

namespace airlock::testing {
namespace {

// stderr without what AddressSanitizer itself prints when the command is cloned onto a stack of
// its own (the vfork-style clone): "ASan is ignoring requested __asan_handle_no_return" and its
// two lines. Under a normal build there is nothing to remove.
std::string without_asan_notes(const std::string& err) {
  std::string out;
  size_t pos = 0;
  while (pos < err.size()) {
    size_t nl = err.find('\n', pos);
    size_t end = nl == std::string::npos ? err.size() : nl + 1;
    std::string_view line(err.data() + pos, end - pos);
    bool asan = (line.starts_with("==") && line.find("WARNING: ASan is ignoring") != std::string_view::npos) ||
                line.starts_with("False positive error reports may follow") ||
                line.starts_with("For details see https://github.com/google/sanitizers/issues/189");
    if (!asan) out.append(line);
    pos = end;
  }
  return out;
}

using Json = nlohmann::json;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// `cmd` run by the shell, its stdout; "" when it fails.
std::string shell_output(const std::string& cmd) {
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[256];
    while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    if (::pclose(p) != 0) return "";
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// project(airlock VERSION x.y.z) in the top CMakeLists.txt.
std::string project_version() {
  std::smatch m;
  std::string text = read_text(std::string(AIRLOCK_SOURCE_DIR) + "/CMakeLists.txt");
  if (!std::regex_search(text, m, std::regex(R"(project\(airlock VERSION ([0-9.]+))"))) return "";
  return m[1];
}

const char* const kPolicy = R"({"schema_version": "airlock.task_policy.v1", "executor": "EXECUTOR",
                                "readable": ["src"], "write_back_paths": ["out"]})";

std::string policy_for(const std::string& executor) {
  std::string p = kPolicy;
  p.replace(p.find("EXECUTOR"), 8, executor);
  return p;
}

// A fixture (as the test's own identity) with a workspace and a policy for one tier, or why not.
struct TierFixture {
  std::unique_ptr<CliFixture> fx;
  std::string policy;
  std::string unavailable;  // why the tier cannot run here ("" when it can)

  explicit TierFixture(const std::string& executor) : fx(std::make_unique<CliFixture>(Identity::Self)) {
    policy = fx->write_policy(policy_for(executor));
    auto planned = fx->run({"plan", "--json", "--policy", policy});
    if (planned.status != 0) unavailable = "the " + executor + " tier is unavailable here: " + planned.err;
  }
  // `run --policy P --workspace W ARGS...`
  CliResult run(const std::vector<std::string>& args) {
    std::vector<std::string> a = {"run", "--policy", policy, "--workspace", fx->workspace()};
    a.insert(a.end(), args.begin(), args.end());
    return fx->run(a);
  }
};

#define SKIP_OR_FAIL_UNLESS_AVAILABLE(t)                                                        \
  do {                                                                                          \
    if (!(t).unavailable.empty()) {                                                             \
      if (require_all_tiers()) FAIL() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but " << (t).unavailable; \
      GTEST_SKIP() << (t).unavailable;                                                          \
    }                                                                                           \
  } while (0)

// `out` as exactly one newline-terminated line of JSON (null, with a failure, when it is not).
Json only_line_as_json(const std::string& out) {
  auto lines = lines_of(out);
  EXPECT_EQ(lines.size(), 1u) << out;
  EXPECT_TRUE(!out.empty() && out.back() == '\n') << out;
  if (lines.size() != 1) return nullptr;
  Json j = Json::parse(lines[0], nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << lines[0];
  return j.is_discarded() ? Json(nullptr) : j;
}

// --- --version ---------------------------------------------------------------------------------

TEST(CliVersion, PrintsTheVersionTheRevisionAndTheSha256OfTheRunningBinary) {
  CliFixture fx(Identity::Self);
  auto r = fx.run_program({fx.binary(), "--version"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(without_asan_notes(r.err), "");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(r.out, m, std::regex(R"(airlock (\S+) revision (\S+) sha256 (\S+)\n)")))
      << r.out;
  EXPECT_EQ(m[1], project_version());
  // The sha256 is of the file this process runs: the fixture's copy of the binary.
  std::string sha = m[3];
  EXPECT_TRUE(std::regex_match(sha, std::regex("[0-9a-f]{64}"))) << sha;
  auto file_sha = sha256_file(fx.binary());
  ASSERT_TRUE(file_sha) << file_sha.error().message;
  EXPECT_EQ(sha, *file_sha);
  // The revision is a commit of this source tree when it is a git checkout, else "unknown".
  std::string rev = m[2];
  std::string src = AIRLOCK_SOURCE_DIR;
  std::string top = shell_output("git -C '" + src + "' rev-parse --show-toplevel 2>/dev/null");
  if (!top.empty() && shell_output("realpath '" + top + "'") == shell_output("realpath '" + src + "'")) {
    EXPECT_TRUE(std::regex_match(rev, std::regex("[0-9a-f]{40}"))) << rev;
    EXPECT_EQ(shell_output("git -C '" + src + "' cat-file -t " + rev + " 2>/dev/null"), "commit") << rev;
  } else {
    EXPECT_EQ(rev, "unknown");
  }
}

TEST(CliVersion, AirlockServeNamesItselfAndHashesItsOwnFile) {
  CliFixture fx(Identity::Self);
  std::string serve = fx.binary() + "-serve";
  auto r = fx.run_program({serve, "--version"});
  ASSERT_EQ(r.status, 0) << r.err;
  auto file_sha = sha256_file(serve);
  ASSERT_TRUE(file_sha) << file_sha.error().message;
  EXPECT_TRUE(r.out.starts_with("airlock-serve " + project_version() + " revision ")) << r.out;
  EXPECT_TRUE(r.out.ends_with(" sha256 " + *file_sha + "\n")) << r.out;
}

// --- the command is everything from the first positional on -----------------------------------

TEST(CliRunCommand, EverythingAfterTheFirstPositionalIsTheCommandsNoDoubleDashNeeded) {
  TierFixture t("landlock");
  SKIP_OR_FAIL_UNLESS_AVAILABLE(t);
  // `ls -la`'s shape: an option of the command right after its name.
  auto ls = t.run({"-q", "printf", "%s\\n", "-la"});
  ASSERT_EQ(ls.status, 0) << ls.err;
  EXPECT_EQ(ls.out, "-la\n");
  // run's own options and the global ones, and `--`, after the command are the command's.
  auto sh = t.run({"-q", "/bin/sh", "-c", "printf '%s|' \"$@\"", "sh", "--state-dir", "x", "--json", "-q",
                   "--", "--policy"});
  ASSERT_EQ(sh.status, 0) << sh.err;
  EXPECT_EQ(sh.out, "--state-dir|x|--json|-q|--|--policy|");
  EXPECT_EQ(without_asan_notes(sh.err), "") << "-q before the command is run's";
}

TEST(CliRunCommand, ArgumentsInBracketsAreTakenAsTyped) {
  TierFixture t("landlock");
  SKIP_OR_FAIL_UNLESS_AVAILABLE(t);
  // CLI11 reads "[a,b]" as a list and "[]" as nothing: `grep '[0-9]'` would have run `grep 0-9`.
  auto r = t.run({"-q", "printf", "<%s>", "[a]", "[%s]", "[b,c]", "[]", "--", "[0-9]"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "<[a]><[%s]><[b,c]><[]><--><[0-9]>");
  auto first = t.run({"--", "[", "1", "=", "1", "]"});
  EXPECT_EQ(first.status, 0) << first.err;
}

TEST(CliRunCommand, RunsOwnFlagsBeforeTheCommandAndDoubleDashStillWork) {
  TierFixture t("landlock");
  SKIP_OR_FAIL_UNLESS_AVAILABLE(t);
  auto quiet = t.run({"--quiet", "--slot", "default", "--", "printf", "ok"});
  ASSERT_EQ(quiet.status, 0) << quiet.err;
  EXPECT_EQ(quiet.out, "ok");
  EXPECT_EQ(without_asan_notes(quiet.err), "");
  auto loud = t.run({"printf", "ok"});
  ASSERT_EQ(loud.status, 0) << loud.err;
  EXPECT_NE(loud.err.find("airlock: landlock tier"), std::string::npos) << loud.err;
}

TEST(CliRunCommand, NoCommandIsAUsageError) {
  CliFixture fx(Identity::Self);
  auto r = fx.run({"run", "-q"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("airlock: refused: AIRLOCK_OPTION_INVALID: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("command"), std::string::npos) << r.err;
}

// --- unknown flags are named -------------------------------------------------------------------

TEST(CliUnknownFlag, IsNamedAsNotAnOptionWithExit2AndNothingRuns) {
  CliFixture fx(Identity::Self);
  auto r = fx.run({"run", "--polcy", "x", "--", "true"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(
      r.err.rfind("airlock: refused: AIRLOCK_OPTION_INVALID: --polcy is not an option of `airlock run`", 0),
      0u)
      << r.err;
  EXPECT_EQ(r.err.find("true"), std::string::npos) << "the command is not what was wrong: " << r.err;
  EXPECT_EQ(fx.session_dirs(), 0u);
  EXPECT_TRUE(fx.receipts().empty());
  // --name=value is named without its value.
  auto eq = fx.run({"run", "--polcy=x", "true"});
  EXPECT_EQ(eq.status, 2);
  EXPECT_NE(eq.err.find("--polcy is not an option of `airlock run`"), std::string::npos) << eq.err;
  // In another verb too, and before the verb.
  auto doctor = fx.run({"doctor", "--jsn"});
  EXPECT_EQ(doctor.status, 2);
  EXPECT_NE(doctor.err.find("AIRLOCK_OPTION_INVALID: --jsn is not an option of `airlock doctor`"),
            std::string::npos)
      << doctor.err;
  auto global = fx.run({"--stat-dir", "x", "doctor"});
  EXPECT_EQ(global.status, 2);
  EXPECT_NE(global.err.find("--stat-dir is not an option"), std::string::npos) << global.err;
}

TEST(CliUnknownFlag, InJsonModeIsOneLineOfJsonNamingIt) {
  CliFixture fx(Identity::Self);
  auto r = fx.run({"run", "--json", "--polcy", "x", "--", "true"});
  EXPECT_EQ(r.status, 2) << r.err;
  Json j = only_line_as_json(r.out);
  EXPECT_EQ(j["refused"]["code"], "AIRLOCK_OPTION_INVALID");
  EXPECT_EQ(j["refused"]["facts"]["unknown_options"], Json::array({"--polcy"}));
  EXPECT_EQ(j["refused"]["facts"]["verb"], "airlock run");
}

// --- global flags after the verb ---------------------------------------------------------------

TEST(CliGlobalFlags, WorkAfterTheVerbAsBeforeIt) {
  TierFixture t("landlock");
  SKIP_OR_FAIL_UNLESS_AVAILABLE(t);
  TempDir before, after;
  const std::string bin = t.fx->binary();
  auto r1 = t.fx->run_program({bin, "--state-dir", before.path(), "run", "-q", "--policy", t.policy,
                               "--workspace", t.fx->workspace(), "--", "true"});
  ASSERT_EQ(r1.status, 0) << r1.err;
  auto r2 = t.fx->run_program({bin, "run", "--state-dir", after.path(), "-q", "--policy", t.policy,
                               "--workspace", t.fx->workspace(), "--", "true"});
  ASSERT_EQ(r2.status, 0) << r2.err;
  // Each run kept its receipts in the state directory it was given, wherever the flag stood.
  for (const auto& dir : {before.path(), after.path()}) {
    std::error_code ec;
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir + "/receipts", ec)) ++n;
    EXPECT_EQ(n, 1u) << dir;
  }
  // --profile (checked against its values) after the verb is the global one.
  auto bad = t.fx->run({"run", "--profile", "lax", "--", "true"});
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_NE(bad.err.find("AIRLOCK_OPTION_INVALID"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("--profile"), std::string::npos) << bad.err;
}

TEST(CliGlobalFlags, DoctorTakesTheStateDirAfterTheVerb) {
  CliFixture fx(Identity::Self);
  TempDir base;
  std::string state = base / "fresh";
  auto r = fx.run_program({fx.binary(), "doctor", "--state-dir", state, "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(Json::parse(r.out).contains("executors"));
  struct stat st {};
  ASSERT_EQ(::stat(state.c_str(), &st), 0) << "doctor made the state directory it was given";
  EXPECT_TRUE(S_ISDIR(st.st_mode));
}

// --- a command that cannot start: 127 not found, 126 not executable ---------------------------

class CliCommandNotStarted : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    t_ = std::make_unique<TierFixture>(GetParam());
    SKIP_OR_FAIL_UNLESS_AVAILABLE(*t_);
    t_->fx->put("src/plain.sh", "#!/bin/sh\necho should-not-run\n");
    ::chmod((t_->fx->workspace() + "/src/plain.sh").c_str(), 0644);
    t_->fx->put("src/dir/keep", "");
  }
  void expect_status(const std::vector<std::string>& command, int status) {
    SCOPED_TRACE(command[0]);
    std::vector<std::string> args = {"-q"};
    args.insert(args.end(), command.begin(), command.end());
    auto r = t_->run(args);
    EXPECT_EQ(r.status, status) << r.err;
    EXPECT_NE(r.err.find("airlock: refused: AIRLOCK_TOOL_FAILED: "), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
    // --json: the same status, the refusal one line of JSON.
    args.insert(args.begin(), "--json");
    auto j = t_->run(args);
    EXPECT_EQ(j.status, status) << j.err;
    auto lines = lines_of(j.out);
    ASSERT_EQ(lines.size(), 1u) << j.out;
    Json refused = Json::parse(lines[0])["refused"];
    EXPECT_EQ(refused["code"], "AIRLOCK_TOOL_FAILED");
    EXPECT_EQ(refused["facts"]["shell_status"], status);
  }
  std::unique_ptr<TierFixture> t_;
};

TEST_P(CliCommandNotStarted, ACommandNotFoundExits127) {
  expect_status({"no-such-program-xyz"}, 127);
  expect_status({"/no/such/program"}, 127);
  expect_status({"./src/no-such-script"}, 127);
}

TEST_P(CliCommandNotStarted, ACommandFoundButNotExecutableExits126) {
  expect_status({"./src/plain.sh"}, 126);  // no execute permission
  expect_status({"./src/dir"}, 126);       // a directory
  expect_status({"/etc/passwd"}, 126);     // outside the workspace, visible, not executable
}

TEST_P(CliCommandNotStarted, ACommandsOwnStatus126Or127PassesThroughUnrefused) {
  auto r = t_->run({"-q", "/bin/sh", "-c", "exit 127"});
  EXPECT_EQ(r.status, 127);
  EXPECT_EQ(without_asan_notes(r.err), "");
}

INSTANTIATE_TEST_SUITE_P(Tiers, CliCommandNotStarted, ::testing::Values("landlock", "namespaces"),
                         [](const auto& info) { return info.param; });

// --- --json: the summary on a line of its own, refusals one line each ------------------------

TEST(CliJson, TheSummaryStartsALineOfItsOwnAfterOutputWithoutANewline) {
  TierFixture t("landlock");
  SKIP_OR_FAIL_UNLESS_AVAILABLE(t);
  auto r = t.run({"--json", "-q", "--", "printf", "hi"});
  ASSERT_EQ(r.status, 0) << r.err;
  auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines[0], "hi");
  EXPECT_EQ(Json::parse(lines[1])["executor"], "landlock");
  EXPECT_EQ(r.out.back(), '\n');
}

TEST(CliJson, NoBlankLineAfterOutputThatEndedItsLine) {
  TierFixture t("landlock");
  SKIP_OR_FAIL_UNLESS_AVAILABLE(t);
  auto r = t.run({"--json", "-q", "printf", "hi\\n"});
  ASSERT_EQ(r.status, 0) << r.err;
  auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines[0], "hi");
  EXPECT_EQ(Json::parse(lines[1])["outcome"]["status"], 0);
  // And no output at all: the summary alone.
  auto quiet = t.run({"--json", "-q", "true"});
  ASSERT_EQ(quiet.status, 0) << quiet.err;
  ASSERT_EQ(lines_of(quiet.out).size(), 1u) << quiet.out;
  EXPECT_TRUE(Json::parse(quiet.out).contains("session"));
}

TEST(CliJson, LargeOutputPassesThroughWhole) {
  TierFixture t("landlock");
  SKIP_OR_FAIL_UNLESS_AVAILABLE(t);
  // More than a pipe holds, without a final newline.
  auto r = t.run({"--json", "-q", "/bin/sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x"});
  ASSERT_EQ(r.status, 0) << r.err;
  auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], std::string(300000, 'x'));
  EXPECT_EQ(Json::parse(lines[1])["outcome"]["status"], 0);
}

TEST(CliJson, ARefusalIsExactlyOneLineOfJson) {
  CliFixture fx(Identity::Self);
  // A policy refused with a fact that spans lines when pretty-printed (its JSON path and more).
  auto pol = fx.write_policy(R"({"schema_version": "airlock.task_policy.v1", "bogus_key": {"a": [1, 2]}})");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"run", "--json", "--policy", pol, "--", "true"},
        std::vector<std::string>{"policy", "check", "--json", pol}}) {
    SCOPED_TRACE(args[0]);
    auto r = fx.run(args);
    EXPECT_EQ(r.status, 125) << r.err;
    Json j = only_line_as_json(r.out);
    EXPECT_EQ(j["refused"]["code"], "AIRLOCK_POLICY_INVALID");
    EXPECT_FALSE(j["refused"]["facts"].empty()) << j.dump();
  }
}

}  // namespace
}  // namespace airlock::testing
