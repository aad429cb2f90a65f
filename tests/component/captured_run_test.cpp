// run_captured over every executor this build applies (landlock, namespaces, and host in the
// development profile), in process as the test's own identity: stdin in, stdout out, stderr's
// tail, the output cap, the per-command working directory and descriptor 3. The namespaces tier
// runs them twice: each sandbox built when its command comes, and each built ahead
// (Executor::keep_warm, as `airlock serve` runs them); BuiltAhead.* checks what building ahead
// must not change.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "base/child_process.h"
#include "base/fs.h"
#include "cli_support.h"
#include "exec/captured_run.h"
#include "exec/owned_executor.h"
#include "linux/probe.h"

namespace airlock::testing {
namespace {

// "TIER" or "TIER_built_ahead".
class CapturedRun : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string tier = GetParam().substr(0, GetParam().find('_'));
    built_ahead_ = GetParam().ends_with("_built_ahead");
    auto pol = policy::parse_layer_text(
        R"({"schema_version": "airlock.task_policy.v1", "executor": ")" + tier +
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
    if (built_ahead_) ex_->executor->keep_warm(true);
  }
  void TearDown() override {
    // Whatever ran, each run's sandbox was the kind this case asks for.
    for (bool b : built_) EXPECT_EQ(b, built_ahead_) << "a run's sandbox was not built as this case asks";
  }
  Result<exec::CapturedRun> run(const exec::Command& c, const std::string& input, size_t cap) {
    auto r = exec::run_captured(*ex_->executor, c, input, cap);
    if (r) built_.push_back(r->outcome.built_ahead);
    return r;
  }
  exec::Command sh(const std::string& script) {
    exec::Command c;
    c.argv = {"/bin/sh", "-c", script};
    return c;
  }
  TempDir state_;
  std::optional<exec::OwnedExecutor> ex_;
  bool built_ahead_ = false;
  std::vector<bool> built_;
};

TEST_P(CapturedRun, StdinArrivesWholeAndStdoutIsCaptured) {
  std::string input(200000, 'x');  // more than a pipe holds: stdin must not depend on one
  input += "\nend";
  auto r = run(sh("wc -c; echo to-stderr >&2"), input, 1 << 20);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->outcome.status.shell_status(), 0);
  EXPECT_EQ(r->out, std::to_string(input.size()) + "\n");
  EXPECT_EQ(r->err_tail, "to-stderr\n");
  EXPECT_FALSE(r->output_limited);
}

TEST_P(CapturedRun, StderrKeepsOnlyItsTail) {
  auto r = run(sh("i=0; while [ $i -lt 2000 ]; do echo line$i >&2; i=$((i+1)); done; exit 3"),
                              "", 1 << 20);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->outcome.status.shell_status(), 3);
  EXPECT_LE(r->err_tail.size(), exec::kStderrTailBytes);
  EXPECT_TRUE(r->err_tail.ends_with("line1999\n")) << r->err_tail;
  EXPECT_EQ(r->err_tail.find("line0\n"), std::string::npos);
}

TEST_P(CapturedRun, AFloodIsStoppedAndTheNextRunIsNotAffected) {
  auto r = run(sh("exec cat /dev/zero"), "", 64 * 1024);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->output_limited);
  EXPECT_TRUE(r->outcome.stopped);
  EXPECT_EQ(r->out.size(), 64u * 1024);
  // stop_run() stopped that run only: the executor still runs the next command.
  auto next = run(sh("echo still-here"), "", 1024);
  ASSERT_TRUE(next) << next.error().message;
  EXPECT_FALSE(next->outcome.stopped);
  EXPECT_EQ(next->out, "still-here\n");
}

TEST_P(CapturedRun, RunsInTheGivenWorkingDirectoryWhereverTheTierShowsIt) {
  std::string host_dir = ex_->dirs.scratch + "/call-1";
  ASSERT_TRUE(make_dirs(host_dir, 0777));
  exec::Command c = sh("echo made > here.txt && pwd && echo $PWD");
  c.cwd = host_dir;
  auto r = run(c, "", 4096);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->outcome.status.shell_status(), 0) << r->err_tail;
  EXPECT_EQ(read_text(host_dir + "/here.txt"), "made\n");
  std::string inside = GetParam().starts_with("namespaces") ? "/tmp/call-1" : host_dir;
  EXPECT_EQ(r->out, inside + "\n" + inside + "\n");
}

TEST_P(CapturedRun, AWorkingDirectoryOutsideTheSessionIsRefused) {
  TempDir elsewhere;
  exec::Command c = sh("true");
  c.cwd = elsewhere.path();
  auto r = run(c, "", 4096);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::PolicyInvalid);
}

// A C string ends at its first NUL: such an argument (JSON can carry "\u0000") would run cut
// short while its receipt records it whole. Refused, and the next command still runs.
TEST_P(CapturedRun, AnArgumentHoldingANulByteIsRefusedNotCutShort) {
  auto r = run(sh(std::string("echo kept\0cut", 13)), "", 4096);
  ASSERT_FALSE(r) << r->out;
  EXPECT_EQ(r.error().code, Code::PolicyInvalid) << r.error().message;
  exec::Command env = sh("echo $X");
  env.env = {std::string("X=a\0b", 5)};
  auto e = run(env, "", 4096);
  ASSERT_FALSE(e) << e->out;
  EXPECT_EQ(e.error().code, Code::PolicyInvalid) << e.error().message;
  auto next = run(sh("echo next"), "", 4096);
  ASSERT_TRUE(next) << next.error().message;
  EXPECT_EQ(next->out, "next\n");
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
  auto r = run(c, "", 4096);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->outcome.status.shell_status(), 0) << r->err_tail;
  // 0-2 and 3: nothing of airlock's own.
  EXPECT_EQ(r->out, "secret-on-fd3\n0 1 2 3\n") << r->out;
}

// Building ahead changes when a sandbox is built, never what it is: each command has a sandbox of
// its own, its wall clock starts with the command, and nothing of a sandbox outlives the
// executor or its stop.
class BuiltAhead : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pol = policy::parse_layer_text(
        R"({"schema_version": "airlock.task_policy.v1", "executor": "namespaces",
            "limits": {"memory_mb": 512, "command_timeout_seconds": 30}})",
        policy::builtin_default(), "test");
    ASSERT_TRUE(pol) << pol.error().message;
    auto facts = linux::probe_host(plan::fact_needs(*pol, exec::built_tiers()));
    auto ex = exec::open_owned_executor(*pol, facts, plan::Profile::Production, state_.path());
    if (!ex) {
      if (require_all_tiers()) FAIL() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but: " << ex.error().message;
      GTEST_SKIP() << "the namespaces tier is unavailable here: " << ex.error().message;
    }
    ex_.emplace(std::move(*ex));
    id_ = ex_->id;  // kept: the checks after the executor is gone need it
    ex_->executor->keep_warm(true);
  }
  Result<exec::CapturedRun> sh(const std::string& script, std::optional<uint64_t> timeout_ms = std::nullopt) {
    exec::Command c;
    c.argv = {"/bin/sh", "-c", script};
    c.timeout_ms = timeout_ms;
    return exec::run_captured(*ex_->executor, c, "", 4096);
  }
  // The processes in this session's cgroups, one list per cgroup directory found (every hierarchy).
  std::vector<std::vector<int>> sandbox_cgroups() const {
    std::vector<std::vector<int>> out;
    for (const char* h : {"memory", "pids", "cpu", "unified"}) {
      std::error_code ec;
      for (auto it = std::filesystem::recursive_directory_iterator(std::string("/sys/fs/cgroup/") + h, ec);
           !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
        if (it.depth() > 3) it.disable_recursion_pending();
        if (!it->path().filename().string().starts_with("airlock-" + id_ + "-")) continue;
        std::vector<int> pids;
        std::ifstream procs(it->path() / "cgroup.procs");
        for (int pid; procs >> pid;) pids.push_back(pid);
        out.push_back(std::move(pids));
      }
    }
    return out;
  }
  // Waits until the next command's sandbox stands built: a cgroup of ours holding its processes.
  std::vector<int> sandbox_waiting() const {
    for (int i = 0; i < 400; ++i) {
      for (const auto& pids : sandbox_cgroups())
        if (!pids.empty()) return pids;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return {};
  }
  // A discarded sandbox ends in the background: its cgroups and processes are gone soon after.
  void expect_gone(const std::vector<int>& pids) const {
    for (int i = 0; i < 400 && !sandbox_cgroups().empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    EXPECT_TRUE(sandbox_cgroups().empty()) << "a sandbox's cgroup was left behind";
    for (int pid : pids) {
      auto st = process_stat(pid);
      EXPECT_TRUE(!st || st->zombie) << "process " << pid << " of the sandbox built ahead still runs";
    }
  }
  // Kills the init of the sandbox waiting (as the OOM killer or anything on the host might);
  // `settled`: waits until its supervisor has ended too.
  void lose_the_sandbox_waiting(bool settled);
  TempDir state_;
  std::optional<exec::OwnedExecutor> ex_;
  std::string id_;
};

TEST_F(BuiltAhead, EachCommandHasASandboxOfItsOwn) {
  for (int i = 0; i < 4; ++i) {
    // A fresh pid namespace makes the command pid 2 (its init is 1); in a sandbox used before,
    // it would be a later one. What the previous command left running is gone with its sandbox.
    auto r = sh("echo $$; pgrep -c sleep || true; sleep 1000 & echo started");
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_TRUE(r->outcome.built_ahead) << "run " << i;
    EXPECT_EQ(r->out, "2\n0\nstarted\n") << "run " << i;
    EXPECT_EQ(r->outcome.descendants_killed, 1) << "run " << i;
  }
}

TEST_F(BuiltAhead, TheWallClockStartsWithTheCommandNotWithItsSandbox) {
  auto first = sh("true");
  ASSERT_TRUE(first) << first.error().message;
  ASSERT_FALSE(sandbox_waiting().empty()) << "no sandbox was built ahead";
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the sandbox waits longer than the limit
  auto in_time = sh("sleep 0.2; echo done", 1000);
  ASSERT_TRUE(in_time) << in_time.error().message;
  EXPECT_TRUE(in_time->outcome.built_ahead);
  EXPECT_FALSE(in_time->outcome.timed_out);
  EXPECT_EQ(in_time->out, "done\n");
  auto late = sh("sleep 30", 300);
  ASSERT_TRUE(late) << late.error().message;
  EXPECT_TRUE(late->outcome.built_ahead);
  EXPECT_TRUE(late->outcome.timed_out);
}

TEST_F(BuiltAhead, NothingOfTheSandboxWaitingOutlivesItsExecutor) {
  auto r = sh("true");
  ASSERT_TRUE(r) << r.error().message;
  auto pids = sandbox_waiting();
  ASSERT_FALSE(pids.empty()) << "no sandbox was built ahead";
  ex_.reset();
  expect_gone(pids);
}

TEST_F(BuiltAhead, AStopDiscardsTheSandboxWaitingAndBuildsNoOther) {
  auto pids = sandbox_waiting();  // built when the executor was asked to keep one warm
  ASSERT_FALSE(pids.empty()) << "no sandbox was built ahead";
  ex_->executor->stop();
  expect_gone(pids);
  auto r = sh("echo ran");
  if (r) {
    EXPECT_TRUE(r->outcome.stopped && !r->outcome.built_ahead) << r->out;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(sandbox_cgroups().empty()) << "a stopped executor built another sandbox";
}

TEST_F(BuiltAhead, ASandboxThatDiedWaitingIsReplacedNotReportedAsTheCommand) {
  for (bool settled : {true, false}) {
    SCOPED_TRACE(settled ? "its supervisor has seen the init end" : "the command comes at once");
    ASSERT_NO_FATAL_FAILURE(lose_the_sandbox_waiting(settled));
    auto r = sh("echo ran");
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_FALSE(r->outcome.built_ahead) << "the lost sandbox was used";
    EXPECT_EQ(r->outcome.status.shell_status(), 0);
    EXPECT_EQ(r->out, "ran\n");
  }
}

void BuiltAhead::lose_the_sandbox_waiting(bool settled) {
  std::vector<int> pids;
  for (int i = 0; i < 400 && pids.size() != 2; ++i) {
    pids = sandbox_waiting();
    if (pids.size() != 2) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  ASSERT_EQ(pids.size(), 2u) << "expected the supervisor and the init waiting";
  // The init is the one whose parent is the supervisor, not us.
  pid_t init = -1, supervisor = -1;
  for (int pid : pids) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    std::istringstream rest(text.substr(text.rfind(')') + 2));
    std::string state;
    int ppid = 0;
    rest >> state >> ppid;
    (ppid == ::getpid() ? supervisor : init) = pid;
  }
  ASSERT_GT(init, 0);
  ASSERT_EQ(::kill(init, SIGKILL), 0);  // the OOM killer, or anything on the host
  for (int i = 0; settled && i < 400 && process_stat(supervisor) && !process_stat(supervisor)->zombie; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

TEST_F(BuiltAhead, ADiscardedSandboxLeavesNoOrphanToItsHostsReaper) {
  // airlock as a container's pid 1, or under a subreaper: an init orphaned by a killed supervisor
  // would become our zombie.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  auto pids = sandbox_waiting();
  ASSERT_FALSE(pids.empty()) << "no sandbox was built ahead";
  ex_.reset();
  expect_gone(pids);
  siginfo_t info{};
  int r = ::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT);
  EXPECT_TRUE(r < 0 || info.si_pid == 0) << "a sandbox's process was left to us to reap: " << info.si_pid;
  while (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG) == 0 && info.si_pid != 0) {
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

INSTANTIATE_TEST_SUITE_P(Tiers, CapturedRun,
                         ::testing::Values("landlock", "landlock_built_ahead", "namespaces", "namespaces_built_ahead",
                                           "host"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace airlock::testing
