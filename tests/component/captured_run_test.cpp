// run_captured over every executor this build applies (landlock, namespaces, and host in the
// development profile), in process as the test's own identity: stdin in, stdout out, stderr's
// tail, the output cap, the per-command working directory and descriptor 3.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

#include "base/fs.h"
#include "cli_support.h"
#include "exec/captured_run.h"
#include "exec/owned_executor.h"
#include "linux/probe.h"

namespace airlock::testing {
namespace {

class CapturedRun : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto pol = policy::parse_layer_text(
        R"({"schema_version": "airlock.task_policy.v1", "executor": ")" + GetParam() +
            R"(", "limits": {"memory_mb": 512, "command_timeout_seconds": 30}})",
        policy::builtin_default(), "test");
    ASSERT_TRUE(pol) << pol.error().message;
    auto facts = linux::probe_host(plan::fact_needs(*pol, exec::built_tiers()));
    auto ex = exec::open_owned_executor(*pol, facts, plan::Profile::Development, state_.path());
    if (!ex) {
      if (require_all_tiers()) FAIL() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but: " << ex.error().message;
      GTEST_SKIP() << "the " << GetParam() << " tier is unavailable here: " << ex.error().message;
    }
    ex_.emplace(std::move(*ex));
  }
  exec::Command sh(const std::string& script) {
    exec::Command c;
    c.argv = {"/bin/sh", "-c", script};
    return c;
  }
  TempDir state_;
  std::optional<exec::OwnedExecutor> ex_;
};

TEST_P(CapturedRun, StdinArrivesWholeAndStdoutIsCaptured) {
  std::string input(200000, 'x');  // more than a pipe holds: stdin must not depend on one
  input += "\nend";
  auto r = exec::run_captured(*ex_->executor, sh("wc -c; echo to-stderr >&2"), input, 1 << 20);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->outcome.status.shell_status(), 0);
  EXPECT_EQ(r->out, std::to_string(input.size()) + "\n");
  EXPECT_EQ(r->err_tail, "to-stderr\n");
  EXPECT_FALSE(r->output_limited);
}

TEST_P(CapturedRun, StderrKeepsOnlyItsTail) {
  auto r = exec::run_captured(*ex_->executor, sh("i=0; while [ $i -lt 2000 ]; do echo line$i >&2; i=$((i+1)); done; exit 3"),
                              "", 1 << 20);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->outcome.status.shell_status(), 3);
  EXPECT_LE(r->err_tail.size(), exec::kStderrTailBytes);
  EXPECT_TRUE(r->err_tail.ends_with("line1999\n")) << r->err_tail;
  EXPECT_EQ(r->err_tail.find("line0\n"), std::string::npos);
}

TEST_P(CapturedRun, AFloodIsStoppedAndTheNextRunIsNotAffected) {
  auto r = exec::run_captured(*ex_->executor, sh("exec cat /dev/zero"), "", 64 * 1024);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->output_limited);
  EXPECT_TRUE(r->outcome.stopped);
  EXPECT_EQ(r->out.size(), 64u * 1024);
  // stop_run() stopped that run only: the executor still runs the next command.
  auto next = exec::run_captured(*ex_->executor, sh("echo still-here"), "", 1024);
  ASSERT_TRUE(next) << next.error().message;
  EXPECT_FALSE(next->outcome.stopped);
  EXPECT_EQ(next->out, "still-here\n");
}

TEST_P(CapturedRun, RunsInTheGivenWorkingDirectoryWhereverTheTierShowsIt) {
  std::string host_dir = ex_->dirs.scratch + "/call-1";
  ASSERT_TRUE(make_dirs(host_dir, 0777));
  exec::Command c = sh("echo made > here.txt && pwd && echo $PWD");
  c.cwd = host_dir;
  auto r = exec::run_captured(*ex_->executor, c, "", 4096);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->outcome.status.shell_status(), 0) << r->err_tail;
  EXPECT_EQ(read_text(host_dir + "/here.txt"), "made\n");
  std::string inside = GetParam() == "namespaces" ? "/tmp/call-1" : host_dir;
  EXPECT_EQ(r->out, inside + "\n" + inside + "\n");
}

TEST_P(CapturedRun, AWorkingDirectoryOutsideTheSessionIsRefused) {
  TempDir elsewhere;
  exec::Command c = sh("true");
  c.cwd = elsewhere.path();
  auto r = exec::run_captured(*ex_->executor, c, "", 4096);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::PolicyInvalid);
}

TEST_P(CapturedRun, APassedDescriptorArrivesAsThreeAndNothingElseLeaks) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  ASSERT_EQ(::write(p[1], "secret-on-fd3", 13), 13);
  ::close(p[1]);
  UniqueFd rd(p[0]);
  exec::Command c;
  // Probes descriptors by fstat: /proc is not readable on every tier.
  c.argv = {"/usr/bin/python3", "-c",
            "import os,sys\nsys.stdout.write(os.read(3, 100).decode() + '\\n')\n"
            "def is_open(fd):\n  try:\n    os.fstat(fd); return True\n  except OSError:\n    return False\n"
            "print(' '.join(str(fd) for fd in range(1024) if is_open(fd)))"};
  c.pass_fd = rd.get();
  auto r = exec::run_captured(*ex_->executor, c, "", 4096);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->outcome.status.shell_status(), 0) << r->err_tail;
  // 0-2 and 3: nothing of airlock's own.
  EXPECT_EQ(r->out, "secret-on-fd3\n0 1 2 3\n") << r->out;
}

INSTANTIATE_TEST_SUITE_P(Tiers, CapturedRun, ::testing::Values("landlock", "namespaces", "host"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace airlock::testing
