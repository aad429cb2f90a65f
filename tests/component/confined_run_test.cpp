// Each confining tier (landlock, namespaces) end to end through `airlock run`, as root and as an
// unprivileged user: the same scenarios, the same expectations.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <grp.h>
#include <termios.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <sstream>
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

struct Case {
  Identity identity;
  std::string executor;
};

class ConfinedRun : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    std::string why;
    if (!identity_available(GetParam().identity, &why)) GTEST_SKIP() << why;
    executor_ = GetParam().executor;
    fx_ = std::make_unique<CliFixture>(GetParam().identity);
    // Whether the tier can run for this identity here, as `airlock plan` decides it.
    auto probe_policy = fx_->write_policy(
        R"({"schema_version": "airlock.task_policy.v1", "executor": ")" + executor_ + R"("})", "probe.json");
    auto planned = fx_->run({"plan", "--json", "--policy", probe_policy});
    if (planned.status != 0) {
      std::string reason = planned.err;
      // Unprivileged users have no writable cgroup on hosts that delegate none: the namespaces
      // tier is then unavailable to them by design, named in the reason, not a failure here.
      bool by_design = GetParam().identity == Identity::Nobody && executor_ == "namespaces" &&
                       reason.find("no cgroup we may write") != std::string::npos;
      if (require_all_tiers() && !by_design) FAIL() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but: " << reason;
      GTEST_SKIP() << "the " << executor_ << " tier is unavailable here: " << reason;
    }
    fx_->put("src/input.txt", "hello from the workspace\n");
    policy_ = fx_->write_policy(policy_json("", R"(["out"])", executor_));
  }
  std::string write_policy(const std::string& body, const std::string& name) {
    std::string json = body;
    json.replace(json.find("EXECUTOR"), 8, executor_);
    return fx_->write_policy(json, name);
  }
  // Host processes whose command line holds `marker` and that are not zombies.
  static std::vector<int> live_with_marker(const std::string& marker) {
    std::vector<int> out;
    for (const auto& p : live_processes())
      if (p.cmdline.find(marker) != std::string::npos) out.push_back(p.pid);
    return out;
  }
  // Waits (30 s at most) until the command has reached `sleep MARKER` (that very process, not
  // airlock or a shell whose arguments mention it): the event a test's signal must follow,
  // never a fixed sleep.
  static void wait_for_marker(const std::string& marker) {
    auto sleeping = [&] {
      for (const auto& p : live_processes())
        if (p.cmdline.starts_with("sleep " + marker)) return true;
      return false;
    };
    for (int i = 0; i < 3000 && !sleeping(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string executor_;
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

TEST_P(ConfinedRun, ReadsTheViewAndPassesTheExitStatusThrough) {
  auto r = run_sh("cat src/input.txt; exit 7");
  EXPECT_EQ(r.status, 7) << r.err;
  EXPECT_EQ(r.out, "hello from the workspace\n");
}

TEST_P(ConfinedRun, WriteInsideAWriteBackPathIsWrittenBack) {
  auto r = run_sh("mkdir -p out/deep && echo result > out/deep/r.txt");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_text(fx_->workspace() + "/out/deep/r.txt"), "result\n");
}

TEST_P(ConfinedRun, WriteOutsideTheViewFailsAndLeavesNothing) {
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

TEST_P(ConfinedRun, WritesOutsideWriteBackPathsStayInTheView) {
  auto r = run_sh("echo changed > src/input.txt; echo $?");
  // src is readable but not a write-back path: Landlock denies the write in the view.
  EXPECT_EQ(read_text(fx_->workspace() + "/src/input.txt"), "hello from the workspace\n");
}

TEST_P(ConfinedRun, HostFilesOutsideTheWorkspaceAreUnreadable) {
  TempDir secret_dir(fx_->uid());
  std::string secret = secret_dir / "key";
  {
    std::ofstream(secret) << "canary-7d1f";
  }
  ::chmod(secret.c_str(), 0644);
  auto r = run_sh("cat " + secret + " || echo DENIED-secret; cat /etc/shadow || echo DENIED-shadow; "
                  "ls /root || echo DENIED-root; ls " + fx_->state_dir() + " || echo DENIED-state; "
                  "ls /var || echo DENIED-var; ls /home || echo DENIED-home");
  EXPECT_EQ(r.out.find("canary-7d1f"), std::string::npos) << r.out;
  for (const char* what : {"secret", "shadow", "root", "state", "var", "home"})
    EXPECT_NE(r.out.find(std::string("DENIED-") + what), std::string::npos) << what << ": " << r.out;
  // Toolchain directories stay readable.
  auto ok = run_sh("test -r /usr/bin/python3 && test -r /etc/passwd && echo readable");
  EXPECT_EQ(ok.out, "readable\n") << ok.err;
}

TEST_P(ConfinedRun, PlantedSymlinkIsRefusedAtWriteBack) {
  auto r = run_sh("ln -s /etc/passwd out/link && echo fine > out/fine.txt");
  EXPECT_EQ(r.status, 125) << r.err;
  EXPECT_NE(r.err.find("airlock: refused: AIRLOCK_WRITE_BACK_REFUSED: out/link (symlink)"), std::string::npos)
      << r.err;
  EXPECT_FALSE(exists(fx_->workspace() + "/out/link"));
  EXPECT_EQ(read_text(fx_->workspace() + "/out/fine.txt"), "fine\n");
}

TEST_P(ConfinedRun, NetworkIsRefused) {
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

TEST_P(ConfinedRun, ForkBombHitsTheProcessLimit) {
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

TEST_P(ConfinedRun, MemoryHogIsStopped) {
  auto r = run_py("b = bytearray(2 * 1024 * 1024 * 1024)\nprint('ALLOCATED')");
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.out.find("ALLOCATED"), std::string::npos);
  EXPECT_NE(r.err.find("MemoryError"), std::string::npos) << r.err;
}

TEST_P(ConfinedRun, CpuSpinnerIsStoppedByTheCpuLimit) {
  std::string pol = write_policy(
      R"({"schema_version": "airlock.task_policy.v1", "executor": "EXECUTOR",
          "limits": {"cpu_seconds": 1, "command_timeout_seconds": 60}})",
      "cpu.json");
  auto r = run_py("while True: pass", pol);
  // SIGXCPU at the soft limit (or SIGKILL at the hard one), not the wall clock.
  EXPECT_TRUE(r.status == 128 + SIGXCPU || r.status == 128 + SIGKILL) << r.status << r.err;
  EXPECT_EQ(r.err.find("AIRLOCK_TOOL_TIMEOUT"), std::string::npos);
}

TEST_P(ConfinedRun, WallClockLimitIsARefusal) {
  std::string pol = write_policy(
      R"({"schema_version": "airlock.task_policy.v1", "executor": "EXECUTOR", "write_back_paths": ["out"],
          "limits": {"command_timeout_seconds": 1}})",
      "wall.json");
  auto r = run_sh("mkdir -p out; echo partial > out/p; sleep 30", pol);
  EXPECT_EQ(r.status, 125);
  EXPECT_NE(r.err.find("airlock: refused: AIRLOCK_TOOL_TIMEOUT"), std::string::npos) << r.err;
  EXPECT_FALSE(exists(fx_->workspace() + "/out/p")) << "a timed-out run writes nothing back";
}

TEST_P(ConfinedRun, SpentSessionBudgetKillsTheCommand) {
  std::string pol = write_policy(
      R"({"schema_version": "airlock.task_policy.v1", "executor": "EXECUTOR", "write_back_paths": ["out"],
          "limits": {"session_budget_seconds": 1, "command_timeout_seconds": 30}})",
      "budget.json");
  auto r = run_sh("echo partial > out/p; sleep 30", pol);
  EXPECT_EQ(r.status, 125);
  EXPECT_NE(r.err.find("airlock: refused: AIRLOCK_BUDGET_EXHAUSTED"), std::string::npos) << r.err;
  EXPECT_FALSE(exists(fx_->workspace() + "/out/p")) << "a spent budget writes nothing back";
}

TEST_P(ConfinedRun, DoubleForkedDaemonIsGoneAfterTheRun) {
  // The daemon carries a marker in its command line, so the host can find it in any pid namespace.
  std::string marker = "300." + std::to_string(::getpid()) + std::to_string(static_cast<int>(GetParam().identity));
  auto r = run_py(
      "import os\n"
      "if os.fork() == 0:\n"
      "    os.setsid()\n"
      "    if os.fork() == 0:\n"
      "        os.execv('/bin/sleep', ['sleep', '" + marker + "'])\n"
      "    os._exit(0)\n"
      "import time; time.sleep(0.3)\n"
      "print('started')\n");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(live_with_marker(marker).empty()) << "a daemon outlived the run";
  for (int pid : live_with_marker(marker)) ::kill(pid, SIGKILL);
}

TEST_P(ConfinedRun, EnvironmentIsReplacedByAnAllowList) {
  auto r = fx_->run({"run", "--policy", policy_, "--workspace", fx_->workspace(), "--", "/usr/bin/env"},
                    {{"AIRLOCK_TEST_SECRET", "s3cr3t-canary"}, {"AWS_SECRET_ACCESS_KEY", "aws-canary"}});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find("canary"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"), std::string::npos);
  EXPECT_NE(r.out.find("LANG=C.UTF-8"), std::string::npos) << "allow-listed variables pass";
}

TEST_P(ConfinedRun, SeccompDeniesWhatLandlockCannot) {
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

TEST_P(ConfinedRun, InheritedFileDescriptorsAreClosed) {
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

TEST_P(ConfinedRun, ReceiptsRecordWhatEnforced) {
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
  EXPECT_EQ(rs[0]["executor"], executor_);
  EXPECT_EQ(rs[0]["tier"], executor_ == "landlock" ? 1 : 2);
  EXPECT_GE(rs[0]["landlock_abi"].get<int>(), 3);
  if (executor_ == "namespaces") {
    EXPECT_EQ(rs[0]["enforced"]["namespaces"]["capabilities"], "none");
    EXPECT_TRUE(rs[1]["outcome"]["teardown_verified"].get<bool>());
  }
  EXPECT_EQ(rs[0]["enforced"]["landlock"]["abi"], rs[0]["landlock_abi"]);
  EXPECT_FALSE(rs[0]["enforced"]["landlock"]["rules"].empty());
  EXPECT_EQ(rs[0]["policy_digest"].get<std::string>().size(), 64u);
  EXPECT_EQ(rs[1]["kind"], "tool.run");
  EXPECT_EQ(rs[1]["outcome"]["status"], 0);
  EXPECT_EQ(rs[2]["kind"], "session.close");
  EXPECT_EQ(rs[2]["written_back"]["written"], Json::array({"out/x"}));
}

TEST_P(ConfinedRun, UnavailableExecutorIsRefusedWith125) {
  std::string pol = fx_->write_policy(
      R"({"schema_version": "airlock.task_policy.v1", "workload": "untrusted_code"})", "untrusted.json");
  auto r = run_sh("echo SHOULD-NOT-RUN", pol);
  if (r.status == 0) GTEST_SKIP() << "this build has a microvm executor";
  EXPECT_EQ(r.status, 125);
  EXPECT_EQ(r.out.find("SHOULD-NOT-RUN"), std::string::npos);
  EXPECT_NE(r.err.find("airlock: refused: AIRLOCK_EXECUTOR_UNAVAILABLE"), std::string::npos) << r.err;
}

TEST_P(ConfinedRun, InvalidPolicyIsRefusedWithItsPath) {
  std::string pol = fx_->write_policy(R"({"schema_version": "airlock.task_policy.v1", "limits": {"memroy_mb": 1}})",
                                      "bad.json");
  auto r = run_sh("echo SHOULD-NOT-RUN", pol);
  EXPECT_EQ(r.status, 125);
  EXPECT_NE(r.err.find("airlock: refused: AIRLOCK_POLICY_INVALID"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("$.limits"), std::string::npos) << r.err;
}

pid_t g_started = 0;
TEST_P(ConfinedRun, StopSignalKillsTheCommandAndWritesNothingBack) {
  g_started = 0;
  std::string marker = "31." + std::to_string(::getpid()) + std::to_string(static_cast<int>(GetParam().identity)) + "2";
  std::thread killer([marker] {
    wait_for_marker(marker);  // out/p is written in the view by then
    if (g_started > 0) ::kill(g_started, SIGTERM);
  });
  auto r = fx_->run({"run", "--policy", policy_, "--workspace", fx_->workspace(), "--", "/bin/sh", "-c",
                     "echo partial > out/p; exec sleep " + marker},
                    {}, 60, [](pid_t p) { g_started = p; });
  killer.join();
  EXPECT_EQ(r.status, 125) << r.err;
  EXPECT_NE(r.err.find("AIRLOCK_SESSION_KILLED"), std::string::npos) << r.err;
  EXPECT_FALSE(exists(fx_->workspace() + "/out/p"));
}

TEST_P(ConfinedRun, SessionViewIsRemovedAfterTheRun) {
  auto r = run_sh("true");
  ASSERT_EQ(r.status, 0) << r.err;
  size_t left = fx_->session_dirs();
  EXPECT_EQ(left, 0u);
}

TEST_P(ConfinedRun, AbandonedSessionIsSweptByTheNextRun) {
  g_started = 0;
  std::string marker = "30." + std::to_string(::getpid()) + std::to_string(static_cast<int>(GetParam().identity)) + "1";
  std::thread killer([marker] {
    wait_for_marker(marker);
    if (g_started > 0) ::kill(g_started, SIGKILL);  // airlock itself dies without cleaning up
  });
  auto killed = fx_->run({"run", "-q", "--policy", policy_, "--workspace", fx_->workspace(), "--", "/bin/sh", "-c",
                          "sleep " + marker + " & exec sleep " + marker},
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
  auto abandoned = fx_->receipts();
  ASSERT_EQ(abandoned.size(), 1u);
  std::string id = std::filesystem::path(abandoned[0]).stem().string();
  auto next = run_sh("true");
  ASSERT_EQ(next.status, 0) << next.err;
  EXPECT_EQ(sessions(), 0u) << "the next run sweeps the abandoned view";
  // ...and its cgroups, in every hierarchy, wherever below the cgroup root they were made.
  for (const char* h : {"memory", "pids", "cpu", "unified"}) {
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(std::string("/sys/fs/cgroup/") + h, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (it.depth() > 2) it.disable_recursion_pending();
      EXPECT_EQ(it->path().filename().string().rfind("airlock-" + id, 0), std::string::npos)
          << "left behind: " << it->path();
    }
  }
  // The command dies with its supervisor; a child it left behind is killed by the sweep where a
  // cgroup holds it (root, or the namespaces tier, whose init takes the whole namespace with it).
  auto left = live_with_marker(marker);
  bool contained_by_design = fx_->uid() == 0 || executor_ == "namespaces";
  if (contained_by_design) {
    EXPECT_TRUE(left.empty()) << "an abandoned command still runs";
  }
  for (int pid : left) ::kill(pid, SIGKILL);
}

// Issue 26: the Landlock tier's holes, each closed on every tier, as root and as a user.

TEST_P(ConfinedRun, CommandKeepsNoCapability) {
  // sethostname to the name the host already has: refused without CAP_SYS_ADMIN, and harmless if
  // it were not. fanotify_init needs CAP_SYS_ADMIN too (and seccomp denies it on landlock).
  auto r = run_py(
      "import ctypes, os\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)\n"
      "data = (ctypes.c_uint32 * 6)()\n"
      "print('capget', libc.capget(hdr, data))\n"
      "print('effective', data[0] | data[3], 'permitted', data[1] | data[4])\n"
      "name = os.uname().nodename.encode()\n"
      "print('sethostname', libc.sethostname(name, len(name)), ctypes.get_errno())\n"
      "print('fanotify_init', libc.fanotify_init(0, 0), ctypes.get_errno())\n");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("capget 0\neffective 0 permitted 0\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sethostname -1 1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fanotify_init -1 1\n"), std::string::npos) << r.out;
}

// A host process of the identity's own uid, killed and reaped on destruction.
struct HostSleep {
  explicit HostSleep(uid_t uid) {
    pid = ::fork();
    if (pid == 0) {
      if (uid != ::getuid() && (::setgroups(0, nullptr) < 0 || ::setresgid(uid, uid, uid) < 0 ||
                                ::setresuid(uid, uid, uid) < 0))
        ::_exit(122);
      ::execl("/bin/sleep", "sleep", "60", nullptr);
      ::_exit(123);
    }
    // Wait for the exec, so what the test reads is sleep's own state.
    for (int i = 0; i < 500 && read_text("/proc/" + std::to_string(pid) + "/comm") != "sleep\n"; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ~HostSleep() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  std::string state() const {
    std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
    auto close = stat.rfind(')');
    // nice is the 19th field; the 3rd (state) follows the ')'.
    std::istringstream in(close == std::string::npos ? "" : stat.substr(close + 2));
    std::string field, nice;
    for (int i = 3; i <= 19 && in >> field; ++i) nice = field;
    return "nice " + nice + "\n" + read_text("/proc/" + std::to_string(pid) + "/limits");
  }
  pid_t pid = -1;
};

TEST_P(ConfinedRun, HostProcessesCannotBeChangedByPid) {
  HostSleep host(fx_->uid());
  std::string before = host.state();
  ASSERT_NE(before.find("Max open files"), std::string::npos) << before;
  std::string pid = std::to_string(host.pid);
  auto r = run_py(
      "import os, resource\n"
      "def attempt(what, f):\n"
      "    try:\n"
      "        f(); print(what, 'ok')\n"
      "    except OSError as e:\n"
      "        print(what, 'failed', e.errno)\n"
      "attempt('setpriority', lambda: os.setpriority(os.PRIO_PROCESS, " + pid + ", 19))\n"
      "attempt('getpriority', lambda: os.getpriority(os.PRIO_PROCESS, " + pid + "))\n"
      "attempt('getpriority_user', lambda: os.getpriority(os.PRIO_USER, os.getuid()))\n"
      "attempt('prlimit', lambda: resource.prlimit(" + pid + ", resource.RLIMIT_NOFILE, (7, 7)))\n"
      "attempt('prlimit_cpu', lambda: resource.prlimit(" + pid + ", resource.RLIMIT_CPU, (1, 1)))\n"
      "attempt('sched_setaffinity', lambda: os.sched_setaffinity(" + pid + ", {0}))\n"
      "attempt('own_nice', lambda: os.setpriority(os.PRIO_PROCESS, 0, 5))\n"
      "attempt('own_prlimit', lambda: resource.prlimit(0, resource.RLIMIT_NOFILE, (100, 100)))\n");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* call : {"setpriority", "getpriority", "getpriority_user", "prlimit", "prlimit_cpu",
                           "sched_setaffinity"})
    EXPECT_NE(r.out.find(std::string(call) + " failed"), std::string::npos) << call << "\n" << r.out;
  // The caller itself stays free to renice and re-limit itself.
  EXPECT_NE(r.out.find("own_nice ok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("own_prlimit ok"), std::string::npos) << r.out;
  EXPECT_EQ(host.state(), before) << "the host process was changed from inside";
}

TEST_P(ConfinedRun, SupervisorLimitsAreOutOfReachAndTheWallClockHolds) {
  std::string policy = write_policy(
      R"({"schema_version": "airlock.task_policy.v1", "executor": "EXECUTOR", "write_back_paths": ["out"],
          "limits": {"command_timeout_seconds": 2}})",
      "short.json");
  auto r = run_py(
      "import os, resource, time\n"
      "for res in (resource.RLIMIT_NOFILE, resource.RLIMIT_CPU):\n"
      "    try:\n"
      "        resource.prlimit(os.getppid(), res, (0, 0)); print('parent limit changed', res)\n"
      "    except OSError as e:\n"
      "        print('parent limit refused', e.errno)\n"
      "time.sleep(30)\n",
      policy);
  EXPECT_EQ(r.status, 125) << r.out << r.err;
  EXPECT_NE(r.err.find("AIRLOCK_TOOL_TIMEOUT"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(r.out.find("parent limit changed"), std::string::npos) << r.out;
}

TEST_P(ConfinedRun, HostSysvIpcIsOutOfReach) {
  // A segment and a queue of the identity's own uid, 0600, as another program of that user has.
  const std::string token = "sysv-canary-" + std::to_string(::getpid());
  int shm = ::shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
  int msg = ::msgget(IPC_PRIVATE, IPC_CREAT | 0600);
  ASSERT_GE(shm, 0);
  ASSERT_GE(msg, 0);
  struct Cleanup {
    int shm, msg;
    ~Cleanup() {
      ::shmctl(shm, IPC_RMID, nullptr);
      ::msgctl(msg, IPC_RMID, nullptr);
    }
  } cleanup{shm, msg};
  void* at = ::shmat(shm, nullptr, 0);
  ASSERT_NE(at, reinterpret_cast<void*>(-1));
  std::memcpy(at, token.c_str(), token.size() + 1);
  ::shmdt(at);
  struct {
    long mtype;
    char mtext[64];
  } m{1, {}};
  std::snprintf(m.mtext, sizeof m.mtext, "%s", token.c_str());
  ASSERT_EQ(::msgsnd(msg, &m, token.size(), 0), 0);
  shmid_ds sds{};
  msqid_ds mds{};
  ASSERT_EQ(::shmctl(shm, IPC_STAT, &sds), 0);
  ASSERT_EQ(::msgctl(msg, IPC_STAT, &mds), 0);
  sds.shm_perm.uid = mds.msg_perm.uid = fx_->uid();
  ASSERT_EQ(::shmctl(shm, IPC_SET, &sds), 0);
  ASSERT_EQ(::msgctl(msg, IPC_SET, &mds), 0);
  auto r = run_py(
      "import ctypes\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "libc.shmat.restype = ctypes.c_void_p\n"
      "p = libc.shmat(" + std::to_string(shm) + ", None, 0o10000)\n"
      "print('shmat', 'ok ' + ctypes.string_at(p).decode() if p not in (None, 2**64 - 1) else 'failed')\n"
      "buf = ctypes.create_string_buffer(128)\n"
      "n = libc.msgrcv(" + std::to_string(msg) + ", buf, 64, 0, 0o4000)\n"
      "print('msgrcv', n, buf.raw[8:8 + max(n, 0)].decode())\n"
      "print('msgget', libc.msgget(0x41424344, 0o1600), ctypes.get_errno())\n");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find(token), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("shmat failed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("msgrcv -1"), std::string::npos) << r.out;
  ASSERT_EQ(::msgctl(msg, IPC_STAT, &mds), 0);
  EXPECT_EQ(mds.msg_qnum, 1u) << "the host's message was consumed from inside";
}

TEST_P(ConfinedRun, InotifyRevealsNoNamesOfUnreadableHostDirectories) {
  TempDir watched(fx_->uid());
  std::atomic<bool> stop = false;
  std::thread churn([&] {
    for (int i = 0; !stop; ++i) {
      std::string path = watched / ("secret-name-" + std::to_string(i));
      ::close(::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
      ::unlink(path.c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  auto r = run_py(
      "import ctypes, os, select, time\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "fd = libc.inotify_init1(0o2000000)\n"
      "print('inotify_init1', fd if fd < 0 else 'ok', ctypes.get_errno())\n"
      "wd = libc.inotify_add_watch(fd, b'" + watched.path() + "', 0x100) if fd >= 0 else -1\n"
      "print('inotify_add_watch', wd if wd < 0 else 'ok', ctypes.get_errno())\n"
      "if wd >= 0 and select.select([fd], [], [], 2)[0]:\n"
      "    print('events', os.read(fd, 4096))\n");
  stop = true;
  churn.join();
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find("secret-name"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("inotify_add_watch -1"), std::string::npos) << r.out;
}

TEST_P(ConfinedRun, GitWorksInside) {
  auto r = run_sh(
      "cd \"$TMPDIR\" && git init -q repo && cd repo && echo hello > f && git add f && "
      "git -c user.name=airlock -c user.email=airlock@example.invalid commit -q -m first && "
      "git log --oneline | wc -l");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "1\n") << r.err;
}

TEST_P(ConfinedRun, NoDaemonOutlivesAnAirlockKilledOutright) {
  g_started = 0;
  std::string marker = "301." + std::to_string(::getpid()) + std::to_string(static_cast<int>(GetParam().identity));
  std::thread killer([marker] {
    wait_for_marker(marker);  // the daemon has left the command's session by then
    if (g_started > 0) ::kill(g_started, SIGKILL);
  });
  auto killed = fx_->run({"run", "-q", "--policy", policy_, "--workspace", fx_->workspace(), "--",
                          "/usr/bin/python3", "-c",
                          "import os, time\n"
                          "if os.fork() == 0:\n"
                          "    os.setsid()\n"
                          "    if os.fork() == 0:\n"
                          "        os.execv('/bin/sleep', ['sleep', '" + marker + "'])\n"
                          "    os._exit(0)\n"
                          "time.sleep(60)\n"},
                         {}, 60, [](pid_t p) { g_started = p; });
  killer.join();
  ASSERT_EQ(killed.status, 128 + SIGKILL);
  std::vector<int> left;
  for (int i = 0; i < 500; ++i) {
    left = live_with_marker(marker);
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(left.empty()) << "a double-forked daemon outlived an airlock killed with SIGKILL";
  for (int pid : left) ::kill(pid, SIGKILL);
  // What the killed airlock left (its view, its cgroups) the next start in the same state
  // directory sweeps: nothing of this test stays on the host.
  auto next = fx_->run({"run", "-q", "--policy", policy_, "--workspace", fx_->workspace(), "--", "/bin/true"});
  EXPECT_EQ(next.status, 0) << next.err;
  size_t views = fx_->session_dirs();
  EXPECT_EQ(views, 0u) << "the next start did not sweep the killed airlock's session";
}

TEST_P(ConfinedRun, TerminalModesAreRestoredAfterTheRun) {
  int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  ASSERT_GE(master, 0);
  ASSERT_EQ(::grantpt(master), 0);
  ASSERT_EQ(::unlockpt(master), 0);
  int slave = ::open(::ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
  ASSERT_GE(slave, 0);
  termios before{};
  ASSERT_EQ(::tcgetattr(slave, &before), 0);
  ASSERT_TRUE(before.c_lflag & ECHO);
  ASSERT_TRUE(before.c_lflag & ICANON);
  fx_->stdin_fd = slave;
  auto r = run_py(
      "import termios\n"
      "a = termios.tcgetattr(0)\n"
      "a[3] &= ~(termios.ECHO | termios.ICANON)\n"
      "termios.tcsetattr(0, termios.TCSANOW, a)\n"
      "print('changed', bool(termios.tcgetattr(0)[3] & termios.ECHO))\n");
  fx_->stdin_fd = -1;
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("changed False"), std::string::npos) << r.out << r.err;
  termios after{};
  ASSERT_EQ(::tcgetattr(slave, &after), 0);
  EXPECT_TRUE(after.c_lflag & ECHO) << "echo stays off after the run";
  EXPECT_TRUE(after.c_lflag & ICANON) << "canonical mode stays off after the run";
  ::close(slave);
  ::close(master);
}

TEST_P(ConfinedRun, FileNamesInAirlocksOwnLinesAreEscaped) {
  auto r = run_sh("printf x > 'out/a\nairlock: forged'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("airlock:   wrote out/a\\nairlock: forged\n"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("\nairlock: forged"), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(EachTierAsEachUser, ConfinedRun,
                         ::testing::Values(Case{Identity::Self, "landlock"}, Case{Identity::Nobody, "landlock"},
                                           Case{Identity::Self, "namespaces"}, Case{Identity::Nobody, "namespaces"}),
                         [](const auto& info) { return info.param.executor + "_" + to_string(info.param.identity); });

}  // namespace
}  // namespace airlock::testing
