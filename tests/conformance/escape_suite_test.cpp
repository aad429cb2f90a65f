// The escape suite through `airlock escape-suite`, as root and as uid 65534, for every executor:
// the host baseline breaches every probe (each probe detects its breach), every real tier contains
// every one. Each run must leave no canary directory and no probe process behind.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>

#include "../component/cli_support.h"

namespace airlock::testing {
namespace {

using Json = nlohmann::json;

// DESIGN.md's ten breaches, then the ones added since, by the names the suite must report.
constexpr const char* kBreaches[] = {
    "read_host_file",
    "write_outside_declared_paths",
    "symlink_write_back",
    "read_credentials",
    "reach_network",
    "see_or_signal_host_process",
    "outlive_session",
    "exceed_memory",
    "exceed_time",
    "exceed_cpu",
    "tiocsti_injection",
    "proc_root_traversal",
    "io_uring_socket",
    "shed_seccomp",
    "session_keyring",
    "second_sandbox_files",
    "hold_capabilities",
    "tamper_host_process",
    "read_sysv_ipc",
    "watch_host_directory",
    "change_supervisor_limits",
    "plant_git_hook",
    "plant_shell_rc",
    "plant_agent_settings",
    "read_through_hard_link",
    // The network door's: run under a code_network allowlist policy.
    "door_dns_query",
    "door_direct_tcp",
    "door_udp",
    "door_ipv6",
    "door_relay_forbidden",
    "door_rebinding_name",
};
constexpr size_t kDoorBreaches = 6;

bool is_door(const std::string& name) { return name.rfind("door_", 0) == 0; }

// Every process whose argv mentions `needle` (a run's canary directory).
std::vector<std::string> processes_mentioning(const std::string& needle) {
  std::vector<std::string> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::string cmd = read_text(std::string("/proc/") + e->d_name + "/cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(needle) != std::string::npos) out.push_back(std::string(e->d_name) + ": " + cmd);
  }
  ::closedir(d);
  return out;
}

bool process_running(pid_t pid) {
  std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

// Runs the suite through the CLI and checks that it cleaned up after itself: the canary
// directories it reports are gone, no process carries them in its argv, no session view is left.
Json run_suite(CliFixture& fx, const std::vector<std::string>& args, CliResult* result,
               void (*on_start)(pid_t) = nullptr, int timeout_seconds = 240) {
  auto t0 = std::chrono::steady_clock::now();
  *result = fx.run(args, {}, timeout_seconds, on_start);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cerr << "[ suite    ] airlock " << ::testing::PrintToString(args) << " as " << to_string(fx.identity())
            << ": exit " << result->status << " in " << took << " s\n";
  Json j = Json::parse(result->out, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    ADD_FAILURE() << "not JSON: " << result->out << "\nstderr: " << result->err;
    return Json::object();
  }
  for (const auto& t : j.value("executors", Json::array())) {
    std::string root = t.value("canary_root", "");
    if (root.empty()) continue;
    EXPECT_EQ(root.rfind("/tmp/airlock-escape-", 0), 0u) << root;
    EXPECT_FALSE(exists(root)) << "the canary directory is left behind: " << root;
    EXPECT_EQ(processes_mentioning(root), std::vector<std::string>{}) << "probe processes are left behind";
    for (const auto& r : t["results"]) {
      if (r["breach"] != "outlive_session" || !r["host_check"].contains("daemon_pid")) continue;
      pid_t daemon = r["host_check"]["daemon_pid"].get<pid_t>();
      if (daemon > 0 && r["host_check"].value("daemon_alive_after_close", false)) {
        EXPECT_FALSE(process_running(daemon)) << "the outlive_session daemon " << daemon << " lives";
      }
    }
  }
  std::error_code ec;
  size_t views = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(fx.state_dir() + "/sessions", ec))
    ++views;
  EXPECT_EQ(views, 0u) << "session views are left behind";
  return j;
}

// One executor, as one identity: the host baseline must breach all, a real tier contain all; a tier
// that cannot have a network door (landlock) refuses the door probes' policy by name instead.
class EscapeSuiteTier : public ::testing::TestWithParam<std::tuple<Identity, std::string>> {
 protected:
  void SetUp() override {
    std::string why;
    if (!identity_available(std::get<0>(GetParam()), &why)) GTEST_SKIP() << why;
    fx_ = std::make_unique<CliFixture>(std::get<0>(GetParam()));
  }
  const std::string& executor() const { return std::get<1>(GetParam()); }
  std::unique_ptr<CliFixture> fx_;
};

TEST_P(EscapeSuiteTier, EveryBreachComesOutAsExpected) {
  bool host = executor() == "host";
  // The microvm tier is verified on a host by `airlock vm verify`, which is this suite run
  // against a real guest: before it passed, the tier is unavailable and says to run it.
  bool vm = executor() == "microvm";
  std::string untrusted =
      fx_->write_policy(R"({"schema_version": "airlock.task_policy.v1", "workload": "untrusted_code"})", "untrusted.json");
  if (vm) {
    auto before = fx_->run({"plan", "--policy", untrusted});
    EXPECT_EQ(before.status, 125);
    EXPECT_NE(before.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE"), std::string::npos) << before.err;
    EXPECT_TRUE(before.err.find("airlock vm verify") != std::string::npos ||
                before.err.find("airlock vm build") != std::string::npos ||
                before.err.find("namespaces tier") != std::string::npos)
        << before.err;
  }
  std::vector<std::string> args;
  if (host) args = {"--profile", "development"};
  if (vm) args = {"vm", "verify", "--json"};
  else
    for (const char* a : {"escape-suite", "--executor", executor().c_str(), "--json"}) args.push_back(a);
  CliResult r;
  // A guest boots per scenario: under TCG that is seconds each.
  Json j = run_suite(*fx_, args, &r, nullptr, vm ? 1200 : 240);
  if (vm && !j.contains("executors")) {
    // verify refused before the suite could run (no image, no acceleration boots, no namespaces tier).
    std::string reason = j.value("code", "") + ": " + j.value("message", "") + " " + r.err;
    bool by_design = std::get<0>(GetParam()) == Identity::Nobody && reason.find("no cgroup we may write") != std::string::npos;
    if (require_all_tiers() && !by_design) FAIL() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but microvm is unavailable: " << reason;
    GTEST_SKIP() << "microvm is unavailable here: " << reason;
  }
  ASSERT_TRUE(j.contains("executors")) << r.err;
  ASSERT_EQ(j["executors"].size(), 1u);
  const Json& tier = j["executors"][0];
  ASSERT_EQ(tier["executor"], executor());

  if (tier["status"] == "unavailable") {
    const Json& refusal = tier["refusal"];
    std::string reason = refusal.value("code", "") + ": " + refusal.value("message", "");
    EXPECT_EQ(r.status, 1) << "an executor named by --executor that cannot run fails the suite";
    if (reason.find("no executor implements") != std::string::npos)
      GTEST_SKIP() << executor() << " is not part of this build";
    // Unprivileged users have no writable cgroup on hosts that delegate none: the namespaces
    // tier is then unavailable to them by design, and the reason says so.
    bool by_design = std::get<0>(GetParam()) == Identity::Nobody &&
                     (executor() == "namespaces" || executor() == "microvm") &&
                     reason.find("no cgroup we may write") != std::string::npos;
    if (require_all_tiers() && !by_design)
      FAIL() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but " << executor() << " is unavailable: " << reason;
    GTEST_SKIP() << executor() << " is unavailable here: " << reason;
  }

  ASSERT_EQ(tier["status"], "ran") << tier.dump(2);
  std::string expected = host ? "breached" : "contained";
  // Only the namespaces tier cuts the network, so only it can have a door.
  bool doorless = !host && executor() != "namespaces";
  EXPECT_EQ(tier["expected"], expected);
  std::map<std::string, Json> by_name;
  for (const auto& res : tier["results"]) by_name[res["breach"].get<std::string>()] = res;
  EXPECT_EQ(by_name.size(), std::size(kBreaches));
  std::string door_refusal;
  for (const char* name : kBreaches) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(by_name.count(name)) << "no result for " << name;
    const Json& res = by_name[name];
    EXPECT_EQ(res["door"], is_door(name));
    if (doorless && is_door(name)) {
      // Never run open, never a silent pass, never counted as contained: the planner's refusal.
      EXPECT_EQ(res["verdict"], "refused") << res.dump(2);
      EXPECT_EQ(res["expected"], "refused");
      std::string code = res["refusal"]["code"], msg = res["refusal"]["message"];
      if (vm) {
        // Isolation enough, but a guest has no network device and no door for guests exists yet.
        EXPECT_EQ(code, "AIRLOCK_EXECUTOR_UNAVAILABLE") << res.dump(2);
        EXPECT_NE(msg.find("the microvm tier's guest has no network device and no network door yet"),
                  std::string::npos)
            << msg;
      } else if (executor() == "container") {
        // Isolation enough (level 2), but the container tier has no door yet.
        EXPECT_EQ(code, "AIRLOCK_EXECUTOR_UNAVAILABLE") << res.dump(2);
        EXPECT_NE(msg.find("the container tier has no network door yet"), std::string::npos) << msg;
      } else {
        // The policy names its executor, so the planner refuses it for the isolation level.
        EXPECT_EQ(code, "AIRLOCK_ISOLATION_POLICY_INVALID") << res.dump(2);
        EXPECT_EQ(msg, "executor " + executor() +
                           " gives isolation level 1, but network for code needs a network cut and a door (level 2)");
      }
      EXPECT_FALSE(res["probe_started"].get<bool>()) << "nothing runs under a refused policy";
      door_refusal = code + ": " + msg;
      continue;
    }
    EXPECT_EQ(res["verdict"], expected)
        << executor() << "/" << name << ": " << res["evidence"].get<std::string>();
    EXPECT_EQ(res["expected"], expected);
    EXPECT_TRUE(res["probe_started"].get<bool>()) << "the probe must have run: " << res.value("stderr", "");
  }
  std::string verdict = tier["verdict"];
  std::string all = std::to_string(std::size(kBreaches)) + "/" + std::to_string(std::size(kBreaches));
  std::string door = std::to_string(kDoorBreaches) + "/" + std::to_string(kDoorBreaches);
  std::string rest = std::to_string(std::size(kBreaches) - kDoorBreaches) + "/" +
                     std::to_string(std::size(kBreaches) - kDoorBreaches);
  if (host)
    EXPECT_EQ(verdict, "host: " + all + " breached — every probe detects its breach");
  else if (doorless)
    EXPECT_EQ(verdict,
              executor() + ": " + rest + " contained; door probes " + door + " refused — " + door_refusal);
  else
    EXPECT_EQ(verdict, executor() + ": " + all + " contained");
  EXPECT_EQ(r.status, 0) << verdict << "\n" << r.err;
  EXPECT_EQ(j["ok"], r.status == 0);
  if (vm) {
    // The pass is recorded, and the planner now chooses the tier, naming what booted.
    EXPECT_TRUE(exists(fx_->state_dir() + "/vm-verified.json"));
    auto after = fx_->run({"plan", "--policy", untrusted, "--json"});
    ASSERT_EQ(after.status, 0) << after.err;
    Json p = Json::parse(after.out);
    EXPECT_EQ(p["executor"], "microvm");
    EXPECT_EQ(p["microvm"]["kernel_sha256"].get<std::string>().size(), 64u);
    EXPECT_EQ(p["microvm"]["initramfs_sha256"].get<std::string>().size(), 64u);
    EXPECT_TRUE(p["microvm"]["acceleration"] == "tcg" || p["microvm"]["acceleration"] == "kvm");
    EXPECT_EQ(p["microvm"]["network_devices"], Json::array());
  }
}

INSTANTIATE_TEST_SUITE_P(
    AsEachUser, EscapeSuiteTier,
    ::testing::Combine(::testing::Values(Identity::Self, Identity::Nobody),
                       ::testing::Values("host", "landlock", "namespaces", "container", "microvm")),
    [](const auto& info) { return to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param); });

// The suite's own behaviour, as each identity.
class EscapeSuiteCli : public ::testing::TestWithParam<Identity> {
 protected:
  void SetUp() override {
    std::string why;
    if (!identity_available(GetParam(), &why)) GTEST_SKIP() << why;
    fx_ = std::make_unique<CliFixture>(GetParam());
  }
  std::unique_ptr<CliFixture> fx_;
};

TEST_P(EscapeSuiteCli, TheHostBaselineIsUnavailableInTheProductionProfile) {
  CliResult r;
  Json j = run_suite(*fx_, {"escape-suite", "--executor", "host", "--json"}, &r);
  EXPECT_EQ(r.status, 1) << r.err;
  ASSERT_EQ(j["executors"].size(), 1u);
  EXPECT_EQ(j["executors"][0]["status"], "unavailable");
  EXPECT_EQ(j["executors"][0]["refusal"]["code"], "AIRLOCK_ISOLATION_POLICY_INVALID");
  EXPECT_EQ(j["executors"][0]["canary_root"], "") << "nothing is planted for a tier that cannot run";
  EXPECT_EQ(j["ok"], false);
}

TEST_P(EscapeSuiteCli, AnUnknownExecutorIsAUsageError) {
  auto r = fx_->run({"escape-suite", "--executor", "auto"});
  EXPECT_EQ(r.status, 2) << r.err;
}

pid_t g_suite = 0;
TEST_P(EscapeSuiteCli, ASignalStopsTheSuiteAndLeavesNothingBehind) {
  g_suite = 0;
  // SIGTERM in the middle of the host baseline, once a probe runs (the canaries are planted by
  // then): the running probe is stopped and every canary removed. Waited for as an event, never a
  // fixed sleep.
  std::thread killer([] {
    auto probing = [] {
      for (const auto& p : live_processes())
        if (p.cmdline.find(".probe/airlock-probe ") != std::string::npos) return true;
      return false;
    };
    for (int i = 0; i < 6000 && !(g_suite > 0 && probing()); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (g_suite > 0) ::kill(g_suite, SIGTERM);
  });
  CliResult r;
  Json j = run_suite(*fx_, {"--profile", "development", "escape-suite", "--executor", "host", "--json"}, &r,
                     [](pid_t p) { g_suite = p; });
  killer.join();
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(j["cancelled"], true);
  EXPECT_EQ(j["ok"], false);
  ASSERT_EQ(j["executors"].size(), 1u);
  EXPECT_LT(j["executors"][0]["results"].size(), std::size(kBreaches));
}

// The probes are airlock-probe, a program of their own beside airlock: no verb of airlock runs
// one, and without the program the suite refuses by name before it plants anything.
TEST_P(EscapeSuiteCli, TheProbesAreAProgramOfTheirOwnBesideAirlock) {
  auto verb = fx_->run({"__probe", "read_host_file", "--run", "/nonexistent"});
  EXPECT_EQ(verb.status, 2) << verb.err;
  TempDir alone;
  ::chmod(alone.path().c_str(), 0755);
  std::string lone = alone.path() + "/airlock";
  std::filesystem::copy_file(fx_->binary(), lone);
  ::chmod(lone.c_str(), 0755);
  auto r = fx_->run_program(
      {lone, "--state-dir", fx_->state_dir(), "--profile", "development", "escape-suite", "--executor", "host"});
  EXPECT_EQ(r.status, 125) << r.err;
  EXPECT_NE(r.err.find("AIRLOCK_CONFIG_ERROR"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(alone.path() + "/airlock-probe"), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(AsEachUser, EscapeSuiteCli, ::testing::Values(Identity::Self, Identity::Nobody),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace airlock::testing
