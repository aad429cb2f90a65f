// The executor conformance battery for tool programs: one named-scenario suite run through
// `airlock tool call` (a real process per dispatch) over every executor this build has, as root
// and as uid 65534. The host executor (development profile) passes every scenario but one:
// it confines nothing, so a hostile tool reads the key file and airlock's /proc/<pid>/environ;
// there that scenario asserts the breach, which proves the probe detects what it claims.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>

#include "../component/cli_support.h"
#include "ledger/effect_ledger.h"

namespace airlock::testing {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kSecret = "battery-secret-7f3a91";

// Each tool program reads the request line first: every one of them speaks the protocol.
const std::string kPrelude = "import json, os, sys, signal, time\nreq = json.loads(sys.stdin.readline())\n";

Json py_tool(const std::string& name, const std::string& body, Json extra = Json::object()) {
  Json t = {{"name", name}, {"argv", {"/usr/bin/python3", "-c", kPrelude + body}}, {"protocol", "json"},
            {"timeout_seconds", 30}};
  for (auto& [k, v] : extra.items()) t[k] = v;
  return t;
}

Json battery_tools(const std::string& marker) {
  return Json::array({
      // Looks for airlock's ambient credentials everywhere it can: its own environment, the key
      // file it is told about, and every readable /proc/<pid>/environ.
      py_tool("hostile", R"(
found = {"env": [k for k, v in os.environ.items() if v == req["args"]["secret"]]}
try:
    found["key_file"] = open(req["args"]["key_file"]).read()
except Exception as e:
    found["key_file"] = None
found["proc_environ"] = []
try:
    pids = os.listdir("/proc")
except Exception:
    pids = []
for pid in pids:
    try:
        if req["args"]["secret"].encode() in open("/proc/%s/environ" % pid, "rb").read():
            found["proc_environ"].append(pid)
    except Exception:
        pass
print(json.dumps(found))
)"),
      py_tool("env_echo", "print(json.dumps({k: os.environ.get(k) for k in req['args']['names']}))\n",
              {{"env", {"BATTERY_ALLOWED"}}}),
      py_tool("creds", R"(
fd = os.environ.get("AIRLOCK_CREDENTIALS_FD")
print(json.dumps({"pipe": os.read(int(fd), 4096).decode() if fd else None,
                  "env": os.environ.get("AIRLOCK_CREDENTIALS")}))
)"),
      // Ignores SIGTERM: only the SIGKILL that follows ends it.
      py_tool("slow", "signal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)  # " + marker + "\n",
              {{"timeout_seconds", 1}}),
      py_tool("flood", "while True:\n    sys.stdout.write('x' * 65536)\n", {{"max_output_bytes", 65536}}),
      py_tool("fails", "print(json.dumps({'never': 'seen'}))\nsys.stderr.write('early noise\\n' * 500 + "
                       "'the real reason: disk on fire\\n')\nsys.exit(3)\n"),
      py_tool("garbage", "print('this is not json {')\n"),
      py_tool("workdir", R"(
cwd = os.getcwd()
listing = os.listdir(".")
open("left-behind.txt", "w").write("x")
print(json.dumps({"cwd": cwd, "listing": listing, "siblings": sorted(os.listdir(".."))}))
)"),
      py_tool("ok", "print(json.dumps({'echo': req['args'], 'key': req['idempotencyKey']}))\n"),
      py_tool("quiet", "pass\n"),
      // The effect (a file the host can see), then a hang: the dispatcher is SIGKILLed here.
      py_tool("effect_then_hang",
              "open('effect', 'w').write(req['idempotencyKey'])\ntime.sleep(600)  # " + marker + "\n"),
  });
}

std::atomic<pid_t> g_airlock{0};

// Every process whose command line mentions `needle` and is not a zombie.
std::vector<std::string> live_processes_mentioning(const std::string& needle) {
  std::vector<std::string> out;
  for (const auto& p : live_processes())
    if (p.cmdline.find(needle) != std::string::npos) out.push_back(std::to_string(p.pid) + ": " + p.cmdline.substr(0, 80));
  return out;
}

class ToolBattery : public ::testing::TestWithParam<std::tuple<Identity, std::string>> {
 protected:
  void SetUp() override {
    std::string why;
    if (!identity_available(identity(), &why)) GTEST_SKIP() << why;
    fx_ = std::make_unique<CliFixture>(identity());
    marker_ = "airlock-battery-" + fs::path(fx_->state_dir()).parent_path().filename().string();
    Json policy = {{"schema_version", "airlock.task_policy.v1"},
                   {"executor", executor()},
                   {"limits", {{"memory_mb", 512}, {"command_timeout_seconds", 60}}},
                   {"tools", battery_tools(marker_)}};
    // The container tier runs the tools from an image of links to the host's /usr, bound read-only.
    if (std::string no = executor() == "container" ? fx_->use_usr_image(policy) : ""; !no.empty()) {
      if (require_all_tiers()) FAIL() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but: " << no;
      GTEST_SKIP() << "the container executor is unavailable here: " << no;
    }
    policy_ = fx_->write_policy(policy.dump());
    ledger_ = fx_->state_dir() + "/effects.jsonl";
    // The microvm tier runs only where `airlock vm verify` passed (the escape suite against a real
    // guest): CTest's vm_verified fixture ran it once on this host; without it the probe call below
    // says why the tier is unavailable.
    if (executor() == "microvm") (void)fx_->adopt_vm_verification(&why);
    // Whether this executor can run for this identity here, as `airlock tool call` decides it.
    auto probe = call("quiet", "{}");
    if (probe.status != 0) {
      bool by_design = identity() == Identity::Nobody && (executor() == "namespaces" || executor() == "microvm") &&
                       probe.err.find("no cgroup we may write") != std::string::npos;
      if (require_all_tiers() && !by_design) FAIL() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but: " << probe.err;
      GTEST_SKIP() << "the " << executor() << " executor is unavailable here: " << probe.err;
    }
    dispatches_ = 1;
  }
  void TearDown() override {
    if (!fx_) return;
    EXPECT_EQ(live_processes_mentioning(marker_), std::vector<std::string>{}) << "tool processes are left behind";
    size_t views = fx_->session_dirs();
    EXPECT_EQ(views, 0u) << "session directories are left behind";
  }
  Identity identity() const { return std::get<0>(GetParam()); }
  const std::string& executor() const { return std::get<1>(GetParam()); }

  CliResult call(const std::string& tool, const std::string& args, std::vector<std::string> extra = {},
                 std::map<std::string, std::string> env = {}) {
    std::vector<std::string> a;
    if (executor() == "host") a = {"--profile", "development"};
    for (const auto& s : {std::string("tool"), std::string("call"), std::string("--json"), std::string("--policy"),
                          policy_, std::string("--ledger"), ledger_, std::string("--tool"), tool,
                          std::string("--args"), args})
      a.push_back(s);
    a.insert(a.end(), extra.begin(), extra.end());
    // airlock's own ambient credential: every scenario runs with it in airlock's environment.
    env.emplace("BATTERY_SECRET", kSecret);
    return fx_->run(a, env, 90, [](pid_t p) { g_airlock = p; });
  }
  // The JSON airlock printed: the result, or {"refused": {...}}.
  static Json output(const CliResult& r) {
    Json j = Json::parse(r.out, nullptr, false);
    if (j.is_discarded()) ADD_FAILURE() << "not JSON: " << r.out << "\nstderr: " << r.err;
    return j;
  }
  Json refused(const CliResult& r, const std::string& code) {
    EXPECT_EQ(r.status, 125) << r.out << r.err;
    Json j = output(r);
    EXPECT_EQ(j["refused"]["code"], code) << j.dump();
    return j["refused"];
  }
  ledger::LedgerScan scan() {
    auto s = ledger::scan_ledger(ledger_);
    EXPECT_TRUE(s) << s.error().message;
    return s.value_or(ledger::LedgerScan{});
  }
  // The dispatch just made reached the ledger with the outcome it really had.
  void expect_last_row(const std::string& tool, const std::optional<std::string>& code) {
    auto s = scan();
    ++dispatches_;
    ASSERT_EQ(s.rows.size(), dispatches_) << "every dispatch is a row";
    EXPECT_TRUE(s.orphans.empty());
    const auto& row = s.rows.back();
    EXPECT_EQ(row.intent.tool, tool);
    EXPECT_FALSE(row.single);
    EXPECT_EQ(row.outcome.ok, !code.has_value());
    if (code) {
      ASSERT_TRUE(row.outcome.error);
      EXPECT_EQ(to_name(row.outcome.error->code), *code);
    }
  }

  std::unique_ptr<CliFixture> fx_;
  std::string policy_, ledger_, marker_;
  size_t dispatches_ = 0;
};

TEST_P(ToolBattery, HostileToolCannotReadAirlocksAmbientCredentials) {
  TempDir keys(fx_->uid());
  std::string key_file = keys / "id_ed25519";
  { std::ofstream(key_file) << "PRIVATE KEY " << kSecret; }
  ::chmod(key_file.c_str(), 0600);
  (void)!::chown(key_file.c_str(), fx_->uid(), fx_->uid());
  auto r = call("hostile", Json({{"secret", kSecret}, {"key_file", key_file}}).dump());
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  Json found = output(r)["result"];
  EXPECT_EQ(found["env"], Json::array()) << "the secret in airlock's environment reached the tool";
  if (executor() == "host") {
    // No confinement: the probe must find what is there to find.
    EXPECT_EQ(found["key_file"], std::string("PRIVATE KEY ") + kSecret);
    EXPECT_NE(found["proc_environ"], Json::array());
  } else {
    EXPECT_TRUE(found["key_file"].is_null()) << found.dump();
    EXPECT_EQ(found["proc_environ"], Json::array()) << found.dump();
  }
  expect_last_row("hostile", std::nullopt);
}

TEST_P(ToolBattery, TheAllowListPassesNamedVariablesOnly) {
  auto r = call("env_echo", R"({"names": ["BATTERY_ALLOWED", "BATTERY_OTHER", "BATTERY_SECRET"]})", {},
                {{"BATTERY_ALLOWED", "yes"}, {"BATTERY_OTHER", "no"}});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(output(r)["result"], Json({{"BATTERY_ALLOWED", "yes"}, {"BATTERY_OTHER", nullptr}, {"BATTERY_SECRET", nullptr}}));
  expect_last_row("env_echo", std::nullopt);
}

TEST_P(ToolBattery, PerCallCredentialsArriveFreshForEachDispatch) {
  // The provider mints a new token per dispatch and sees which call it is for.
  std::string provider = "printf 'tok:%s:%s' \"$AIRLOCK_TOOL\" \"$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \\n')\"";
  auto first = call("creds", "{}", {"--credentials-command", provider});
  auto second = call("creds", "{}", {"--credentials-command", provider});
  ASSERT_EQ(first.status, 0) << first.out << first.err;
  ASSERT_EQ(second.status, 0) << second.out << second.err;
  std::string a = output(first)["result"]["pipe"], b = output(second)["result"]["pipe"];
  EXPECT_TRUE(a.starts_with("tok:creds:")) << a;
  EXPECT_NE(a, b) << "credentials are minted per dispatch, never reused";
  EXPECT_TRUE(output(first)["result"]["env"].is_null()) << "the pipe, not the environment";
  auto via_env = call("creds", "{}", {"--credentials-command", provider, "--credentials-env"});
  ASSERT_EQ(via_env.status, 0) << via_env.err;
  EXPECT_TRUE(output(via_env)["result"]["env"].get<std::string>().starts_with("tok:creds:"));
  // A provider that fails refuses the call before anything is dispatched.
  auto broken = call("creds", "{}", {"--credentials-command", "exit 4"});
  refused(broken, "AIRLOCK_CONFIG_ERROR");
  dispatches_ += 2;
  expect_last_row("creds", std::nullopt);
}

TEST_P(ToolBattery, TheTimeoutKillsASlowToolThatIgnoresSigterm) {
  auto r = call("slow", "{}");
  refused(r, "AIRLOCK_TOOL_TIMEOUT");
  expect_last_row("slow", "AIRLOCK_TOOL_TIMEOUT");
}

TEST_P(ToolBattery, TheOutputCapKillsAFlood) {
  auto r = call("flood", "{}");
  Json e = refused(r, "AIRLOCK_OUTPUT_LIMIT");
  EXPECT_EQ(e["facts"]["max_output_bytes"], 65536);
  expect_last_row("flood", "AIRLOCK_OUTPUT_LIMIT");
}

TEST_P(ToolBattery, ANonZeroExitSurfacesTypedWithItsStderrTail) {
  auto r = call("fails", "{}");
  Json e = refused(r, "AIRLOCK_TOOL_FAILED");
  EXPECT_EQ(e["facts"]["exit_code"], 3);
  std::string tail = e["facts"]["stderr_tail"];
  EXPECT_TRUE(tail.ends_with("the real reason: disk on fire\n")) << tail;
  EXPECT_LE(tail.size(), 4096u);
  EXPECT_EQ(r.out.find("never"), std::string::npos) << "stdout of a failed tool is no result";
  expect_last_row("fails", "AIRLOCK_TOOL_FAILED");
}

TEST_P(ToolBattery, UnparseableOutputIsRejectedAndRecordedAsAnError) {
  auto r = call("garbage", "{}");
  Json e = refused(r, "AIRLOCK_PROTOCOL_ERROR");
  EXPECT_EQ(e["facts"]["stdout_head"], "this is not json {");
  expect_last_row("garbage", "AIRLOCK_PROTOCOL_ERROR");
  // Empty stdout is the null result, not an error.
  auto quiet = call("quiet", "{}");
  ASSERT_EQ(quiet.status, 0) << quiet.err;
  EXPECT_TRUE(output(quiet)["result"].is_null());
  expect_last_row("quiet", std::nullopt);
}

TEST_P(ToolBattery, EachCallGetsAFreshEmptyWorkdirThatIsGoneAfterwards) {
  std::vector<std::string> seen;
  for (int i = 0; i < 2; ++i) {
    auto r = call("workdir", "{}");
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    Json j = output(r);
    EXPECT_EQ(j["result"]["listing"], Json::array()) << "the workdir starts empty";
    std::string host_dir = j["workdir"];
    EXPECT_EQ(j["result"]["siblings"], Json::array({fs::path(host_dir).filename().string()}))
        << "no other call's directory beside it";
    std::string inside = j["result"]["cwd"];
    EXPECT_EQ(fs::path(inside).filename(), fs::path(host_dir).filename());
    EXPECT_FALSE(exists(host_dir)) << "the workdir is removed after the call";
    seen.push_back(host_dir);
    expect_last_row("workdir", std::nullopt);
    auto s = scan();
    EXPECT_EQ(s.rows.back().intent.workdir, host_dir);
  }
  EXPECT_NE(seen[0], seen[1]);
}

TEST_P(ToolBattery, EveryDispatchReachesTheLedgerWithItsRealOutcome) {
  auto r = call("ok", R"({"n": 1})", {"--run-id", "run-battery", "--step", "4", "--ordinal", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  Json j = output(r);
  EXPECT_EQ(j["result"]["echo"], Json({{"n", 1}}));
  EXPECT_EQ(j["result"]["key"], j["idempotency_key"]) << "the tool gets the key the ledger records";
  expect_last_row("ok", std::nullopt);
  auto s = scan();
  const auto& row = s.rows.back();
  EXPECT_EQ(row.intent.key, j["idempotency_key"]);
  EXPECT_EQ(row.intent.attempt_id, j["attempt_id"]);
  EXPECT_EQ(row.intent.run_id, "run-battery");
  EXPECT_EQ(row.intent.span, "step-4.2");
  EXPECT_LE(row.intent.started_at, row.outcome.finished_at);
  // The single-record form, for a ledger without the intent capability: one line, same facts.
  auto single = call("garbage", "{}", {"--single-record"});
  refused(single, "AIRLOCK_PROTOCOL_ERROR");
  auto after = scan();
  ASSERT_EQ(after.rows.size(), dispatches_ + 1);
  EXPECT_TRUE(after.rows.back().single);
  ASSERT_TRUE(after.rows.back().outcome.error);
  EXPECT_EQ(after.rows.back().outcome.error->code, Code::ProtocolError);
}

TEST_P(ToolBattery, ASigkillBetweenEffectAndOutcomeLeavesTheOrphanIntentRecordedBeforeTheEffect) {
  g_airlock = 0;
  CliResult killed;
  std::thread dispatch([&] { killed = call("effect_then_hang", R"({"pay": 5})", {"--run-id", "run-kill"}); });
  // Wait for the effect to be visible on the host, in the call's working directory.
  std::string effect;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (effect.empty() && std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    for (const auto& s : fs::directory_iterator(fx_->state_dir() + "/sessions", ec))
      for (const auto& c : fs::directory_iterator(s.path() / "tmp", ec))
        if (c.path().filename().string().starts_with("call-") && exists((c.path() / "effect").string()) &&
            !read_text((c.path() / "effect").string()).empty())
          effect = (c.path() / "effect").string();
    if (effect.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(effect.empty()) << "the tool never made its effect";
  // At the first moment the effect can be seen, its intent is already in the ledger.
  auto at_effect = scan();
  ASSERT_EQ(at_effect.orphans.size(), 1u) << "the intent is recorded before the effect";
  pid_t pid = g_airlock.load();
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  dispatch.join();
  EXPECT_EQ(killed.status, 128 + SIGKILL);

  auto s = scan();
  EXPECT_EQ(s.rows.size(), dispatches_) << "no outcome for the killed dispatch";
  ASSERT_EQ(s.orphans.size(), 1u);
  const auto& o = s.orphans[0].intent;
  // Everything needed to reconcile: which call, which arguments, where, when.
  fs::path call_dir = fs::path(effect).parent_path();
  EXPECT_EQ(o.workdir, call_dir.string());
  EXPECT_EQ(call_dir.filename().string(), "call-" + o.attempt_id);
  EXPECT_EQ(o.key, read_text(effect)) << "the key the tool acted under";
  EXPECT_EQ(o.tool, "effect_then_hang");
  EXPECT_EQ(o.run_id, "run-kill");
  EXPECT_FALSE(o.args_hash.empty());
  struct stat st{};
  ASSERT_EQ(::stat(effect.c_str(), &st), 0);
  EXPECT_LE(o.started_at, st.st_mtim.tv_sec * 1000LL + st.st_mtim.tv_nsec / 1000000);
  // `airlock ledger scan` shows it to a person.
  auto shown = fx_->run({"ledger", "scan", ledger_});
  EXPECT_EQ(shown.status, 0) << shown.err;
  EXPECT_NE(shown.out.find("orphaned intents"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find(o.attempt_id), std::string::npos) << shown.out;

  // The killed dispatcher's tool dies with it (parent-death signal down the chain).
  for (int i = 0; i < 500 && !live_processes_mentioning(marker_).empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(live_processes_mentioning(marker_), std::vector<std::string>{});
  // The next dispatch sweeps what the killed one left (its session directory, its cgroups),
  // and a sibling attempt's outcome never clears the orphan.
  auto next = call("ok", "{}");
  ASSERT_EQ(next.status, 0) << next.err;
  auto after = scan();
  EXPECT_EQ(after.orphans.size(), 1u);
  EXPECT_EQ(after.rows.size(), dispatches_ + 1);
}

INSTANTIATE_TEST_SUITE_P(
    AsEachUser, ToolBattery,
    ::testing::Combine(::testing::Values(Identity::Self, Identity::Nobody),
                       ::testing::Values("host", "landlock", "namespaces", "container", "microvm")),
    [](const auto& info) { return to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param); });

}  // namespace
}  // namespace airlock::testing
