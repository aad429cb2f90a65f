// The Landlock tier end to end through `airlock run`, as root and as an unprivileged user.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli_support.h"
#include "ledger/receipts.h"
#include "linux/probe.h"

namespace airlock::testing {
namespace {

using Json = nlohmann::json;

std::string policy_json(const std::string& limits_extra = "", const std::string& write_back = R"(["out"])",
                        const std::string& executor = "landlock") {
  return R"({"schema_version": "airlock.task_policy.v1", "task_id": "t-test",
             "executor": ")" + executor + R"(", "readable": ["src", "out"], "write_back_paths": )" + write_back +
         R"(, "limits": {"memory_mb": 512, "cpu_seconds": 20, "max_processes": 32,
             "command_timeout_seconds": 30)" + limits_extra + "}}";
}

class LandlockRun : public ::testing::TestWithParam<Identity> {
 protected:
  void SetUp() override {
    std::string why;
    if (!identity_available(GetParam(), &why)) GTEST_SKIP() << why;
    auto facts = linux::probe_host();
    if (facts.landlock_abi < 3) {
      if (require_all_tiers()) FAIL() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but Landlock ABI is " << facts.landlock_abi;
      GTEST_SKIP() << "Landlock ABI >= 3 is not available (measured " << facts.landlock_abi << ")";
    }
    fx_ = std::make_unique<CliFixture>(GetParam());
    fx_->put("src/input.txt", "hello from the workspace\n");
    policy_ = fx_->write_policy(policy_json());
  }
  CliResult run_sh(const std::string& script, const std::string& policy = "") {
    return fx_->run({"run", "--policy", policy.empty() ? policy_ : policy, "--workspace", fx_->workspace(), "--",
                     "/bin/sh", "-c", script});
  }
  CliResult run_py(const std::string& code, const std::string& policy = "") {
    return fx_->run({"run", "--policy", policy.empty() ? policy_ : policy, "--workspace", fx_->workspace(), "--",
                     "/usr/bin/python3", "-c", code});
  }
  std::unique_ptr<CliFixture> fx_;
  std::string policy_;
};

TEST_P(LandlockRun, ReadsTheViewAndPassesTheExitStatusThrough) {
  auto r = run_sh("cat src/input.txt; exit 7");
  EXPECT_EQ(r.status, 7) << r.err;
  EXPECT_EQ(r.out, "hello from the workspace\n");
}

TEST_P(LandlockRun, WriteInsideAWriteBackPathIsWrittenBack) {
  auto r = run_sh("mkdir -p out/deep && echo result > out/deep/r.txt");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_text(fx_->workspace() + "/out/deep/r.txt"), "result\n");
}

TEST_P(LandlockRun, WriteOutsideTheViewFailsAndLeavesNothing) {
  TempDir outside(fx_->uid());
  std::string target = outside / "escaped";
  auto r = run_sh("echo x > " + target + " && echo WROTE");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.out.find("WROTE"), std::string::npos);
  EXPECT_FALSE(exists(target));
  // The workspace itself (outside the view) is not writable either.
  auto w = run_sh("echo x > " + fx_->workspace() + "/src/direct && echo WROTE");
  EXPECT_EQ(w.out.find("WROTE"), std::string::npos);
  EXPECT_FALSE(exists(fx_->workspace() + "/src/direct"));
}

TEST_P(LandlockRun, WritesOutsideWriteBackPathsStayInTheView) {
  auto r = run_sh("echo changed > src/input.txt; echo $?");
  // src is readable but not a write-back path: Landlock denies the write in the view.
  EXPECT_EQ(read_text(fx_->workspace() + "/src/input.txt"), "hello from the workspace\n");
}

TEST_P(LandlockRun, HostFilesOutsideTheWorkspaceAreUnreadable) {
  TempDir secret_dir(fx_->uid());
  std::string secret = secret_dir / "key";
  {
    std::ofstream(secret) << "canary-7d1f";
  }
  ::chmod(secret.c_str(), 0644);
  auto r = run_sh("cat " + secret + "; cat /etc/shadow; ls /root; ls /home; ls " + fx_->state_dir() +
                  "; ls /var; ls /tmp; echo done");
  EXPECT_EQ(r.out.find("canary-7d1f"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("done"), std::string::npos);
  // Toolchain directories stay readable.
  auto ok = run_sh("test -r /usr/bin/python3 && test -r /etc/passwd && echo readable");
  EXPECT_EQ(ok.out, "readable\n") << ok.err;
}

TEST_P(LandlockRun, PlantedSymlinkIsRefusedAtWriteBack) {
  auto r = run_sh("ln -s /etc/passwd out/link && echo fine > out/fine.txt");
  EXPECT_EQ(r.status, 125) << r.err;
  EXPECT_NE(r.err.find("airlock: refused: AIRLOCK_WRITE_BACK_REFUSED: out/link (symlink)"), std::string::npos)
      << r.err;
  EXPECT_FALSE(exists(fx_->workspace() + "/out/link"));
  EXPECT_EQ(read_text(fx_->workspace() + "/out/fine.txt"), "fine\n");
}

TEST_P(LandlockRun, NetworkIsRefused) {
  // A listener on the host's loopback: the sandboxed command must not reach it.
  int srv = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  ASSERT_GE(srv, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(srv, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(srv, 4), 0);
  socklen_t len = sizeof a;
  ::getsockname(srv, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  auto r = run_py(
      "import socket\n"
      "for fam in (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK, socket.AF_PACKET):\n"
      "    try:\n"
      "        s = socket.socket(fam, socket.SOCK_DGRAM if fam != socket.AF_INET else socket.SOCK_STREAM)\n"
      "        print('created', fam)\n"
      "        if fam == socket.AF_INET:\n"
      "            s.connect(('127.0.0.1', " + std::to_string(port) + "))\n"
      "            print('CONNECTED')\n"
      "    except OSError as e:\n"
      "        print('denied', fam, e.errno)\n");
  EXPECT_EQ(r.out.find("CONNECTED"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("created"), std::string::npos) << r.out;
  sockaddr_in peer{};
  socklen_t plen = sizeof peer;
  EXPECT_LT(::accept(srv, reinterpret_cast<sockaddr*>(&peer), &plen), 0) << "the listener got a connection";
  ::close(srv);
}

TEST_P(LandlockRun, ForkBombHitsTheProcessLimit) {
  auto r = run_py(
      "import os, time\n"
      "n = 0\n"
      "try:\n"
      "    for _ in range(500):\n"
      "        if os.fork() == 0:\n"
      "            time.sleep(30); os._exit(0)\n"
      "        n += 1\n"
      "    print('forked', n)\n"
      "except BlockingIOError:\n"
      "    print('limited after', n)\n");
  ASSERT_NE(r.out.find("limited after"), std::string::npos) << r.out << r.err;
  int n = std::stoi(r.out.substr(r.out.find("after") + 6));
  EXPECT_LE(n, 32);
  EXPECT_NE(r.err.find("killed"), std::string::npos) << "the children left behind are killed: " << r.err;
}

TEST_P(LandlockRun, MemoryHogIsStopped) {
  auto r = run_py("b = bytearray(2 * 1024 * 1024 * 1024)\nprint('ALLOCATED')");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.out.find("ALLOCATED"), std::string::npos);
  EXPECT_NE(r.err.find("MemoryError"), std::string::npos) << r.err;
}

TEST_P(LandlockRun, CpuSpinnerIsStoppedByTheCpuLimit) {
  std::string pol = fx_->write_policy(
      R"({"schema_version": "airlock.task_policy.v1", "executor": "landlock",
          "limits": {"cpu_seconds": 1, "command_timeout_seconds": 60}})",
      "cpu.json");
  auto r = run_py("while True: pass", pol);
  // SIGXCPU at the soft limit (or SIGKILL at the hard one), not the wall clock.
  EXPECT_TRUE(r.status == 128 + SIGXCPU || r.status == 128 + SIGKILL) << r.status << r.err;
  EXPECT_EQ(r.err.find("AIRLOCK_TOOL_TIMEOUT"), std::string::npos);
}

TEST_P(LandlockRun, WallClockLimitIsARefusal) {
  std::string pol = fx_->write_policy(
      R"({"schema_version": "airlock.task_policy.v1", "executor": "landlock", "write_back_paths": ["out"],
          "limits": {"command_timeout_seconds": 1}})",
      "wall.json");
  auto r = run_sh("mkdir -p out; echo partial > out/p; sleep 30", pol);
  EXPECT_EQ(r.status, 125);
  EXPECT_NE(r.err.find("airlock: refused: AIRLOCK_TOOL_TIMEOUT"), std::string::npos) << r.err;
  EXPECT_FALSE(exists(fx_->workspace() + "/out/p")) << "a timed-out run writes nothing back";
}

TEST_P(LandlockRun, DoubleForkedDaemonIsGoneAfterTheRun) {
  auto r = run_py(
      "import os, time\n"
      "r, w = os.pipe()\n"
      "if os.fork() == 0:\n"
      "    os.setsid()\n"
      "    if os.fork() == 0:\n"
      "        os.write(w, str(os.getpid()).encode()); time.sleep(300); os._exit(0)\n"
      "    os._exit(0)\n"
      "os.close(w)\n"
      "print(os.read(r, 32).decode())\n");
  ASSERT_EQ(r.status, 0) << r.err;
  pid_t daemon = std::stoi(r.out);
  ASSERT_GT(daemon, 1);
  errno = 0;
  EXPECT_EQ(::kill(daemon, 0), -1) << "pid " << daemon << " still exists";
  EXPECT_EQ(errno, ESRCH);
}

TEST_P(LandlockRun, EnvironmentIsReplacedByAnAllowList) {
  auto r = fx_->run({"run", "--policy", policy_, "--workspace", fx_->workspace(), "--", "/usr/bin/env"},
                    {{"AIRLOCK_TEST_SECRET", "s3cr3t-canary"}, {"AWS_SECRET_ACCESS_KEY", "aws-canary"}});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find("canary"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"), std::string::npos);
  EXPECT_NE(r.out.find("LANG=C.UTF-8"), std::string::npos) << "allow-listed variables pass";
}

TEST_P(LandlockRun, SeccompDeniesWhatLandlockCannot) {
  auto r = run_py(
      "import ctypes, errno, fcntl, termios, os\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "print('ptrace', libc.ptrace(0, 0, 0, 0), ctypes.get_errno())\n"
      "print('unshare', libc.unshare(0x10000000), ctypes.get_errno())\n"
      "try:\n"
      "    fcntl.ioctl(0, termios.TIOCSTI, b'x'); print('tiocsti ok')\n"
      "except OSError as e:\n"
      "    print('tiocsti', e.errno)\n");
  EXPECT_NE(r.out.find("ptrace -1 1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("unshare -1 1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tiocsti 1\n"), std::string::npos) << r.out;
}

TEST_P(LandlockRun, InheritedFileDescriptorsAreClosed) {
  int fd = ::open("/etc/hostname", O_RDONLY);  // no O_CLOEXEC: airlock itself inherits it
  ASSERT_GE(fd, 3);
  auto r = run_py(
      "import os\n"
      "open_fds = []\n"
      "for fd in range(3, 64):\n"
      "    try:\n"
      "        os.fstat(fd); open_fds.append(fd)\n"
      "    except OSError:\n"
      "        pass\n"
      "print('open', open_fds)\n");
  ::close(fd);
  EXPECT_NE(r.out.find("open []"), std::string::npos) << r.out << r.err;
}

TEST_P(LandlockRun, ReceiptsRecordWhatEnforced) {
  auto r = run_sh("echo hi > out/x");
  ASSERT_EQ(r.status, 0) << r.err;
  auto files = fx_->receipts();
  ASSERT_EQ(files.size(), 1u);
  auto chain = ledger::verify_chain(files[0]);
  ASSERT_TRUE(chain) << chain.error().message;
  EXPECT_EQ(chain->receipts, 3u);
  std::ifstream in(files[0]);
  std::string line;
  std::vector<Json> rs;
  while (std::getline(in, line)) rs.push_back(Json::parse(line));
  ASSERT_EQ(rs.size(), 3u);
  EXPECT_EQ(rs[0]["kind"], "session.open");
  EXPECT_EQ(rs[0]["executor"], "landlock");
  EXPECT_EQ(rs[0]["tier"], 1);
  EXPECT_GE(rs[0]["landlock_abi"].get<int>(), 3);
  EXPECT_EQ(rs[0]["enforced"]["landlock"]["abi"], rs[0]["landlock_abi"]);
  EXPECT_FALSE(rs[0]["enforced"]["landlock"]["rules"].empty());
  EXPECT_EQ(rs[0]["policy_digest"].get<std::string>().size(), 64u);
  EXPECT_EQ(rs[1]["kind"], "tool.run");
  EXPECT_EQ(rs[1]["outcome"]["status"], 0);
  EXPECT_EQ(rs[2]["kind"], "session.close");
  EXPECT_EQ(rs[2]["written_back"]["written"], Json::array({"out/x"}));
}

TEST_P(LandlockRun, UnavailableExecutorIsRefusedWith125) {
  std::string pol = fx_->write_policy(
      R"({"schema_version": "airlock.task_policy.v1", "workload": "untrusted_code"})", "untrusted.json");
  auto r = run_sh("echo SHOULD-NOT-RUN", pol);
  if (r.status == 0) GTEST_SKIP() << "this build has a microvm executor";
  EXPECT_EQ(r.status, 125);
  EXPECT_EQ(r.out.find("SHOULD-NOT-RUN"), std::string::npos);
  EXPECT_NE(r.err.find("airlock: refused: AIRLOCK_EXECUTOR_UNAVAILABLE"), std::string::npos) << r.err;
}

TEST_P(LandlockRun, InvalidPolicyIsRefusedWithItsPath) {
  std::string pol = fx_->write_policy(R"({"schema_version": "airlock.task_policy.v1", "limits": {"memroy_mb": 1}})",
                                      "bad.json");
  auto r = run_sh("echo SHOULD-NOT-RUN", pol);
  EXPECT_EQ(r.status, 125);
  EXPECT_NE(r.err.find("airlock: refused: AIRLOCK_POLICY_INVALID"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("$.limits"), std::string::npos) << r.err;
}

pid_t g_started = 0;
TEST_P(LandlockRun, StopSignalKillsTheCommandAndWritesNothingBack) {
  g_started = 0;
  std::thread killer([] {
    for (int i = 0; i < 100 && g_started == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    if (g_started > 0) ::kill(g_started, SIGTERM);
  });
  auto r = fx_->run({"run", "--policy", policy_, "--workspace", fx_->workspace(), "--", "/bin/sh", "-c",
                     "echo partial > out/p; sleep 30"},
                    {}, 60, [](pid_t p) { g_started = p; });
  killer.join();
  EXPECT_EQ(r.status, 125) << r.err;
  EXPECT_NE(r.err.find("AIRLOCK_SESSION_KILLED"), std::string::npos) << r.err;
  EXPECT_FALSE(exists(fx_->workspace() + "/out/p"));
}

TEST_P(LandlockRun, SessionViewIsRemovedAfterTheRun) {
  auto r = run_sh("true");
  ASSERT_EQ(r.status, 0) << r.err;
  std::error_code ec;
  size_t left = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(fx_->state_dir() + "/sessions", ec)) ++left;
  EXPECT_EQ(left, 0u);
}

TEST_P(LandlockRun, AbandonedSessionIsSweptByTheNextRun) {
  g_started = 0;
  std::thread killer([] {
    for (int i = 0; i < 100 && g_started == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    if (g_started > 0) ::kill(g_started, SIGKILL);  // airlock itself dies without cleaning up
  });
  auto killed = fx_->run({"run", "-q", "--policy", policy_, "--workspace", fx_->workspace(), "--", "/bin/sh", "-c",
                          "echo $$; exec sleep 30"},
                         {}, 60, [](pid_t p) { g_started = p; });
  killer.join();
  ASSERT_EQ(killed.status, 128 + SIGKILL);
  std::error_code ec;
  auto sessions = [&] {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(fx_->state_dir() + "/sessions", ec)) ++n;
    return n;
  };
  EXPECT_EQ(sessions(), 1u) << "the killed run left its view behind";
  auto next = run_sh("true");
  ASSERT_EQ(next.status, 0) << next.err;
  EXPECT_EQ(sessions(), 0u) << "the next run sweeps the abandoned view";
  ASSERT_FALSE(killed.out.empty());
  pid_t command = std::stoi(killed.out);
  // Dead means gone or a zombie: its new parent (pid 1 here) reaps it when it will.
  std::string stat = read_text("/proc/" + std::to_string(command) + "/stat");
  bool alive = !stat.empty() && stat.substr(stat.rfind(')') + 2, 1) != "Z";
  EXPECT_FALSE(alive) << "the abandoned command " << command << " still runs: " << stat;
}

INSTANTIATE_TEST_SUITE_P(AsEachUser, LandlockRun, ::testing::Values(Identity::Self, Identity::Nobody),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace airlock::testing
