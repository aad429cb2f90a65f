// call_tool_program in process on the landlock tier: the intent gates the dispatch, each
// workdir is gone while the session still lives, and the protocol's reading of stdout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "base/fs.h"
#include "cli_support.h"
#include "exec/owned_executor.h"
#include "exec/tool_program.h"
#include "ledger/effect_ledger.h"
#include "linux/probe.h"

namespace airlock::testing {
namespace {

namespace fs = std::filesystem;

class ToolProgram : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pol = policy::parse_layer_text(R"({"schema_version": "airlock.task_policy.v1", "executor": "landlock",
        "tools": [{"name": "effect", "argv": ["/bin/sh", "-c",
                   "read line; echo \"$line\" > ../effect; ls -A; echo '{\"ok\": true}'"], "protocol": "json"}]})",
                                        policy::builtin_default(), "test");
    ASSERT_TRUE(pol) << pol.error().message;
    policy_ = *pol;
    auto ex = exec::open_owned_executor(policy_, linux::probe_host(plan::fact_needs(policy_)),
                                        plan::Profile::Production, state_.path());
    if (!ex) {
      if (require_all_tiers()) FAIL() << ex.error().message;
      GTEST_SKIP() << "the landlock tier is unavailable here: " << ex.error().message;
    }
    ex_.emplace(std::move(*ex));
  }
  exec::ToolCall call() { return {&policy_.tools[0], Json{{"n", 1}}, "ik2-test", "run-1", "span-1"}; }
  std::vector<std::string> call_dirs() {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(ex_->dirs.scratch))
      if (e.path().filename().string().starts_with("call-")) out.push_back(e.path().string());
    return out;
  }
  TempDir state_;
  policy::TaskPolicy policy_;
  std::optional<exec::OwnedExecutor> ex_;
};

TEST_F(ToolProgram, AFailedIntentWriteRefusesTheDispatchAndNothingRuns) {
  std::string full = state_ / "full";
  ASSERT_EQ(::symlink("/dev/full", full.c_str()), 0);
  auto led = ledger::EffectLedger::open(full);
  ASSERT_TRUE(led) << led.error().message;
  auto r = exec::call_tool_program(*ex_->executor, ex_->dirs, call(), *led, nullptr);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::LedgerWriteFailed);
  EXPECT_FALSE(exists(ex_->dirs.scratch + "/effect")) << "the tool ran without its intent on record";
  EXPECT_EQ(call_dirs(), std::vector<std::string>{});
}

TEST_F(ToolProgram, EachWorkdirIsGoneBeforeTheNextCallWhileTheSessionLives) {
  auto led = ledger::EffectLedger::open(state_ / "effects.jsonl");
  ASSERT_TRUE(led);
  for (int i = 0; i < 2; ++i) {
    auto r = exec::call_tool_program(*ex_->executor, ex_->dirs, call(), *led, nullptr);
    ASSERT_TRUE(r) << r.error().message << r.error().facts.dump();
    EXPECT_EQ(r->result, Json({{"ok", true}}));
    EXPECT_EQ(call_dirs(), std::vector<std::string>{});
    // The tool saw the request line, and an empty directory (ls -A printed nothing before the JSON).
    EXPECT_EQ(read_text(ex_->dirs.scratch + "/effect"),
              R"({"args":{"n":1},"idempotencyKey":"ik2-test","tool":"effect"})" "\n");
  }
  auto s = ledger::scan_ledger(state_ / "effects.jsonl");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->rows.size(), 2u);
}

TEST(ToolOutput, TrimmedStdoutIsTheResultAndAnythingElseIsAProtocolError) {
  EXPECT_EQ(exec::parse_tool_output(" \n{\"a\": [1, 2]}\n\n").value(), Json({{"a", {1, 2}}}));
  EXPECT_TRUE(exec::parse_tool_output("").value().is_null());
  EXPECT_TRUE(exec::parse_tool_output("\n \t\n").value().is_null());
  EXPECT_EQ(exec::parse_tool_output("42").value(), Json(42));
  for (std::string bad : std::vector<std::string>{"{\"a\": 1} trailing", "{\"a\": 1}\n{\"b\": 2}", "not json", "{\"a\": \"\xff\"}",
                          std::string("{\"a\": \"\xed\xa0\x80\"}")}) {
    auto r = exec::parse_tool_output(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, Code::ProtocolError) << bad;
  }
}

}  // namespace
}  // namespace airlock::testing
