// The microvm tier end to end, through the real `airlock` on this host (TCG here): a guest sees
// none of the host's processes, files or network; write-back refuses what the guest planted;
// nothing of a guest outlives it; a pooled guest serves exactly one call.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <algorithm>
#include <atomic>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "serve_support.h"

namespace airlock::testing {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

struct Qemu {
  int pid;
  std::vector<std::string> cgroups;  // the cgroup directories it was in, as /sys/fs/cgroup paths
};

int parent_of(const std::string& pid) {
  std::istringstream st(read_text("/proc/" + pid + "/status"));
  for (std::string line; std::getline(st, line);)
    if (line.starts_with("PPid:")) return std::stoi(line.substr(5));
  return 0;
}

// QEMU processes descended from `ancestor` (the airlock the test started).
std::vector<Qemu> qemus_under(int ancestor) {
  std::vector<Qemu> out;
  for (const auto& p : live_processes()) {
    if (p.cmdline.find("qemu-system") == std::string::npos) continue;
    std::string pid = std::to_string(p.pid);
    int up = parent_of(pid);
    while (up > 1 && up != ancestor) up = parent_of(std::to_string(up));
    if (up != ancestor) continue;
    Qemu q{p.pid, {}};
    std::istringstream cg(read_text("/proc/" + pid + "/cgroup"));
    for (std::string line; std::getline(cg, line);) {
      // "ID:CONTROLLERS:PATH" (v1) or "0::PATH" (v2)
      auto a = line.find(':'), b = line.find(':', a + 1);
      std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
      if (path.find("airlock-") == std::string::npos) continue;
      std::string first = controllers.substr(0, controllers.find(','));
      q.cgroups.push_back(controllers.empty() ? "/sys/fs/cgroup" + path : "/sys/fs/cgroup/" + first + path);
    }
    out.push_back(std::move(q));
  }
  return out;
}

template <typename F>
bool eventually(F f, int seconds) {
  for (int i = 0; i < seconds * 10; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return f();
}

class MicrovmTier : public ::testing::TestWithParam<Identity> {
 protected:
  void SetUp() override {
    std::string why;
    if (!identity_available(GetParam(), &why)) GTEST_SKIP() << why;
    fx_ = std::make_unique<CliFixture>(GetParam());
    if (!fx_->adopt_vm_verification(&why)) {
      if (require_all_tiers()) FAIL() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but the microvm tier is unverified: " << why;
      GTEST_SKIP() << why;
    }
    fx_->put("src/a.txt", "from the host\n");
    policy_ = fx_->write_policy(R"({"schema_version": "airlock.task_policy.v1", "workload": "untrusted_code",
                                    "readable": ["src"], "write_back_paths": ["out"],
                                    "limits": {"memory_mb": 256, "command_timeout_seconds": 120}})");
  }
  CliResult run_sh(const std::string& script, void (*on_start)(pid_t) = nullptr) {
    auto r = fx_->run({"run", "--policy", policy_, "--workspace", fx_->workspace(), "--", "/bin/sh", "-c", script},
                      {}, 300, on_start);
    if (r.status == 125 && r.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE") != std::string::npos)
      ADD_FAILURE() << "the microvm tier is verified but did not run: " << r.err;
    return r;
  }
  std::unique_ptr<CliFixture> fx_;
  std::string policy_;
};

TEST_P(MicrovmTier, TheGuestSeesNoHostProcessFileOrNetwork) {
  // A host process with a name to look for, a host file outside the workspace, a host listener.
  std::string marker = "airlock-host-marker-" + std::to_string(::getpid());
  pid_t host_proc = ::fork();
  if (host_proc == 0) {
    ::execl("/bin/bash", "bash", "-c", ("exec -a " + marker + " sleep 600").c_str(), nullptr);
    ::_exit(127);
  }
  TempDir secret_dir(fx_->uid());
  std::string secret = secret_dir / "key";
  std::ofstream(secret) << "canary-vm-5e1a";
  ::chmod(secret.c_str(), 0644);
  ::chmod(secret_dir.path().c_str(), 0755);
  eventually([&] { return read_text("/proc/" + std::to_string(host_proc) + "/cmdline").starts_with(marker); }, 5);

  auto r = run_sh("echo KERNEL $(uname -r); echo PID1 $(cat /proc/1/cmdline); cat /proc/[0-9]*/cmdline | tr '\\0' ' '; echo;"
                  "cat " + secret + " || echo DENIED-secret; ls " + fx_->state_dir() + " || echo DENIED-state;"
                  "cat /etc/shadow || echo DENIED-shadow; ls /home || echo DENIED-home;"
                  "echo NETDEVS $(tail -n +3 /proc/net/dev | cut -d: -f1); cat src/a.txt");
  ::kill(host_proc, SIGKILL);
  ::waitpid(host_proc, nullptr, 0);
  ASSERT_EQ(r.status, 0) << r.err;
  struct utsname host{};
  ::uname(&host);
  // Its own kernel: the guest's, not the host's.
  EXPECT_EQ(r.out.substr(0, 7), "KERNEL ") << r.out;
  EXPECT_EQ(r.out.find(std::string("KERNEL ") + host.release + "\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(marker), std::string::npos) << "a host process is visible in the guest: " << r.out;
  // pid 1 is the guest agent, not the host's init nor airlock's.
  EXPECT_NE(r.out.find("\nPID1 /init\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("canary-vm-5e1a"), std::string::npos) << r.out;
  for (const char* what : {"secret", "state", "shadow", "home"})
    EXPECT_NE(r.out.find(std::string("DENIED-") + what), std::string::npos) << what << ": " << r.out;
  // No network device at all: loopback alone.
  auto net = r.out.find("\nNETDEVS");
  ASSERT_NE(net, std::string::npos);
  std::string devs = r.out.substr(net + 1, r.out.find('\n', net + 1) - net - 1);
  EXPECT_TRUE(devs == "NETDEVS lo" || devs == "NETDEVS") << devs;
  // The workspace view did cross.
  EXPECT_NE(r.out.find("from the host\n"), std::string::npos) << r.out;
}

TEST_P(MicrovmTier, WriteBackRefusesWhatTheGuestPlanted) {
  // A hard link to a host file cannot even be made (the view is a copy, src and out apart).
  auto r = run_sh("ln -s /etc/passwd out/link; ln src/a.txt out/hard; echo fine > out/fine.txt");
  EXPECT_EQ(r.status, 125) << r.err;
  EXPECT_NE(r.err.find("AIRLOCK_WRITE_BACK_REFUSED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("out/link (symlink)"), std::string::npos) << r.err;
  EXPECT_FALSE(exists(fx_->workspace() + "/out/link"));
  EXPECT_FALSE(exists(fx_->workspace() + "/out/hard"));
  EXPECT_EQ(read_text(fx_->workspace() + "/src/a.txt"), "from the host\n");
  struct stat st{};
  ASSERT_EQ(::stat((fx_->workspace() + "/src/a.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 1u) << "a hard link to a host file was made";
}

// The policy's process limit binds inside the guest, where the command is the guest's root and
// RLIMIT_NPROC would not: a shell that forks sleepers without end is stopped at the limit (the
// shell itself and limit - 1 children), and airlock says the guest's pids.max is in force.
TEST_P(MicrovmTier, TheGuestStopsForksAtTheProcessLimit) {
  constexpr int kLimit = 16;
  std::string limit = std::to_string(kLimit);
  std::string policy = fx_->write_policy(
      R"({"schema_version": "airlock.task_policy.v1", "workload": "untrusted_code", "readable": ["src"],
          "write_back_paths": ["out"], "limits": {"memory_mb": 256, "command_timeout_seconds": 120,
          "max_processes": )" + limit + "}}",
      "forks.json");
  // dash ends with "Cannot fork" at the first fork refused; each sleeper counted before the next.
  auto r = fx_->run({"run", "--policy", policy, "--workspace", fx_->workspace(), "--", "/bin/sh", "-c",
                     "i=0; while [ $i -lt " + std::to_string(kLimit * 8) +
                         " ]; do sleep 600 & i=$((i+1)); echo $i; done; echo UNBOUNDED"},
                    {}, 300);
  ASSERT_EQ(r.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("guest pids.max " + limit), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("UNBOUNDED"), std::string::npos) << "the guest forked past its limit: " << r.out;
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.err.find("fork"), std::string::npos) << r.err;
  // Stopped exactly at the limit: not before it (the limit is the policy's, not something smaller).
  std::string out = r.out;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  EXPECT_EQ(out.substr(out.rfind('\n') + 1), std::to_string(kLimit - 1)) << r.out;
}

// The command runs as guest root, yet cannot forge its own status: the agent holds the status
// port open for the whole run (a virtio console port opens once at a time).
TEST_P(MicrovmTier, TheCommandCannotForgeItsStatus) {
  auto r = run_sh("if echo 'exit 0' > /dev/vport0p3; then echo forged; else echo refused; fi; exit 3");
  EXPECT_EQ(r.status, 3) << r.out << r.err;
  EXPECT_NE(r.out.find("refused"), std::string::npos) << r.out << r.err;
}

// Every verb takes its facts from the one probe: doctor, like run and plan, sees the verification
// (it once probed without the microVM's facts and called a verified tier unverified).
TEST_P(MicrovmTier, DoctorSeesTheVerificationAsRunDoes) {
  auto r = fx_->run({"doctor", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  Json report = Json::parse(r.out);
  bool found = false;
  for (const auto& e : report["executors"])
    if (e["executor"] == "microvm") {
      found = true;
      EXPECT_TRUE(e["available"].get<bool>()) << e.dump();
    }
  EXPECT_TRUE(found) << r.out;
}

// The command's wall time starts when the guest's agent is ready, never at QEMU's start: a boot
// made three seconds slow (the test seam) costs the one-second command nothing.
TEST_P(MicrovmTier, TheCommandsClockStartsWhenTheGuestIsReady) {
  std::string policy = fx_->write_policy(
      R"({"schema_version": "airlock.task_policy.v1", "workload": "untrusted_code", "readable": ["src"],
          "write_back_paths": ["out"], "limits": {"memory_mb": 256, "command_timeout_seconds": 1}})",
      "one-second.json");
  auto r = fx_->run({"run", "--policy", policy, "--workspace", fx_->workspace(), "--", "/bin/sh", "-c", "echo ran"},
                    {{"AIRLOCK_TEST_GUEST_BOOT_DELAY_MS", "3000"}}, 300);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "ran\n") << r.err;
  EXPECT_EQ(r.err.find("AIRLOCK_TOOL_TIMEOUT"), std::string::npos) << r.err;
}

// QEMU, its cgroups, its mounts and the session's files are gone when airlock returns, even with
// a daemon left running inside the guest.
std::atomic<int> g_airlock_pid = 0;

TEST_P(MicrovmTier, NothingOfTheGuestSurvivesIt) {
  std::vector<Qemu> seen;
  g_airlock_pid = 0;
  std::atomic<bool> done = false;
  std::thread watch([&] {
    eventually(
        [&] {
          if (g_airlock_pid) seen = qemus_under(g_airlock_pid);
          return done || (!seen.empty() && !seen[0].cgroups.empty());
        },
        120);
  });
  auto r = run_sh("(sleep 1000 &) ; sleep 3; echo started", [](pid_t p) { g_airlock_pid = p; });
  done = true;
  watch.join();
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "started\n");
  ASSERT_FALSE(seen.empty()) << "QEMU was never seen running: the checks below would prove nothing";
  EXPECT_FALSE(seen[0].cgroups.empty()) << "QEMU ran outside a cgroup of ours";
  EXPECT_FALSE(exists("/proc/" + std::to_string(seen[0].pid) + "/cmdline") &&
               read_text("/proc/" + std::to_string(seen[0].pid) + "/cmdline").find("qemu") != std::string::npos);
  for (const auto& cg : seen[0].cgroups) EXPECT_FALSE(exists(cg)) << cg << " outlived the run";
  std::string mounts = read_text("/proc/self/mountinfo");
  EXPECT_EQ(mounts.find(fx_->state_dir()), std::string::npos) << "a mount of the session is left";
  size_t sessions = 0;
  std::error_code ec;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(fx_->state_dir() + "/sessions", ec)) ++sessions;
  EXPECT_EQ(sessions, 0u) << "session directories are left behind";
}

INSTANTIATE_TEST_SUITE_P(AsEachUser, MicrovmTier, ::testing::Values(Identity::Self, Identity::Nobody),
                         [](const auto& info) { return to_string(info.param); });

// `airlock serve --vm-pool 1`: a guest is booted ahead and waits; each call takes one, never one
// that served before, and the pool refills in the background; closing the session ends them all.
TEST(MicrovmPool, EachCallGetsAFreshPreBootedGuest) {
  CliFixture fx(Identity::Self);
  std::string why;
  if (!fx.adopt_vm_verification(&why)) {
    if (require_all_tiers()) FAIL() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but the microvm tier is unverified: " << why;
    GTEST_SKIP() << why;
  }
  ServeProcess srv(fx, {"--vm-pool", "1"});
  ASSERT_TRUE(srv.ready()) << srv.failure();
  server::HttpClient c(srv.unix_endpoint(), 300);
  Json policy = {{"schema_version", "airlock.task_policy.v1"},
                 {"workload", "untrusted_code"},
                 {"workspace", fx.workspace()},
                 {"tools",
                  {{{"name", "mark"},
                    {"argv", {"/bin/sh", "-c", "test -e /run/used && echo REUSED; touch /run/used; echo fresh"}}}}},
                 {"limits", {{"memory_mb", 256}, {"command_timeout_seconds", 120}}}};
  auto opened = c.request("POST", "/v1/sessions", policy.dump());
  ASSERT_TRUE(opened) << opened.error().message;
  ASSERT_EQ(opened->status, 201) << opened->body;
  Json o = opened->json();
  EXPECT_EQ(o["executor"], "microvm");
  EXPECT_EQ(o["enforced"]["microvm"]["pool"], 1);
  std::string base = "/v1/sessions/" + o["session"].get<std::string>();
  // Booted ahead: a QEMU for this workspace runs before any call.
  EXPECT_TRUE(eventually([&] { return !qemus_under(srv.pid()).empty(); }, 60))
      << "no guest was booted ahead";
  std::set<int> pids;
  for (int i = 0; i < 3; ++i) {
    // The pooled guest is waiting before the call (the one before it has ended).
    ASSERT_TRUE(eventually([&] { return qemus_under(srv.pid()).size() == 1; }, 60));
    pids.insert(qemus_under(srv.pid()).at(0).pid);
    auto ran = c.post(base + "/run_tool", {{"tool", "mark"}});
    ASSERT_TRUE(ran) << ran.error().message;
    EXPECT_EQ(ran->json()["stdout"], "fresh\n") << ran->body;
    EXPECT_EQ(ran->json()["outcome"]["exit_code"], 0) << ran->body;
  }
  EXPECT_EQ(pids.size(), 3u) << "a guest served more than one call";
  auto closed = c.post(base + "/close", Json::object());
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->status, 200) << closed->body;
  EXPECT_TRUE(eventually([&] { return qemus_under(srv.pid()).empty(); }, 30))
      << "a pooled guest outlived its session";
}

}  // namespace
}  // namespace airlock::testing
