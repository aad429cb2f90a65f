// `airlock agent run` through the real binary: bypass refusal before anything starts, the closed
// `confinement` setting, the first receipt, and credential blinding tried by every route by a
// stand-in agent of the test's own; then the real Claude Code and Codex CLIs (npm) confined.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/hash.h"
#include "cli_support.h"
#include "policy/agent_profile.h"

namespace airlock::testing {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

// Tries every route to the operator's credentials: a direct read, a search, a script it writes,
// a hard link, the environment of a sibling (and of every process it can see), its own
// environment; then reads the credential airlock handed it on descriptor 3.
constexpr const char* kStandIn = R"sh(#!/bin/sh
h="$1"
echo "TMPDIR=$TMPDIR"
for f in .claude/.credentials.json .claude.json .codex/auth.json .codex/config.toml .gemini/oauth_creds.json notes.txt; do
  echo "direct $f:"; cat "$h/$f" 2>&1
done
echo "search:"; grep -r CANARY "$h" 2>&1; find "$h" -type f -exec cat {} + 2>&1
printf '#!/bin/sh\nexec cat "$@"\n' > "$TMPDIR/reader" && chmod +x "$TMPDIR/reader"
echo "script:"; "$TMPDIR/reader" "$h/.codex/auth.json" "$h/.claude/.credentials.json" 2>&1
echo "hardlink:"; ln "$h/.codex/auth.json" "$TMPDIR/hl" 2>&1 && cat "$TMPDIR/hl" 2>&1
ln "$h/.claude/.credentials.json" "$h/hl" 2>&1 && cat "$h/hl" 2>&1
sleep 30 & s=$!
echo "sibling:"; tr '\0' '\n' < /proc/$s/environ 2>&1
for e in /proc/[0-9]*/environ; do tr '\0' '\n' < "$e"; done 2>/dev/null
kill $s
echo "env:"; env
echo "FD3=$(cat <&3)"
)sh";

struct Planted {
  std::map<std::string, std::string> canaries;  // relative path -> its secret
};

class AgentRun : public ::testing::TestWithParam<Identity> {
 protected:
  void SetUp() override {
    std::string why;
    if (!identity_available(GetParam(), &why)) GTEST_SKIP() << why;
    fx_ = std::make_unique<CliFixture>(GetParam());
    // Not under /tmp: inside the namespaces tier /tmp is the session's scratch directory.
    home_ = std::make_unique<TempDir>(std::nullopt, "/var/tmp");
    bin_ = std::make_unique<TempDir>(std::nullopt, "/var/tmp");
    agent_ = *bin_ / "standin-agent";
    std::ofstream(agent_) << kStandIn;
    ::chmod(agent_.c_str(), 0755);
    for (const char* rel : {".claude/.credentials.json", ".claude.json", ".codex/auth.json", ".codex/config.toml",
                            ".gemini/oauth_creds.json"}) {
      std::string secret = "CANARY-" + random_id();
      fs::create_directories(fs::path(*home_ / rel).parent_path());
      std::ofstream(*home_ / rel) << secret << "\n";
      // Readable by every identity: only the blinding stands between the agent and the bytes.
      ::chmod((*home_ / rel).c_str(), 0644);
      planted_[rel] = secret;
    }
    for (const char* d : {".claude", ".codex", ".gemini"}) ::chmod((*home_ / d).c_str(), 0755);
    visible_ = "VISIBLE-" + random_id();
    std::ofstream(*home_ / "notes.txt") << visible_ << "\n";
    ::chmod((*home_ / "notes.txt").c_str(), 0644);
  }

  std::string policy(const std::string& executor, bool home_readable) {
    std::string ro = "\"" + bin_->path() + "\"" + (home_readable ? ", \"" + home_->path() + "\"" : "");
    return fx_->write_policy(R"({"schema_version": "airlock.task_policy.v1", "executor": ")" + executor +
                             R"(", "read_only_paths": [)" + ro + R"(], "limits": {"command_timeout_seconds": 60}})");
  }

  CliResult run(const std::vector<std::string>& extra, const std::string& pol) {
    std::vector<std::string> args = {"agent", "run", "--profile", "claude-code", "--policy", pol,
                                     "--executable", agent_, "--pass-env", "OPENAI_API_KEY", "--pass-env", "LC_ALL"};
    args.insert(args.end(), extra.begin(), extra.end());
    return fx_->run(args, {{"HOME", home_->path()},
                           {"ANTHROPIC_API_KEY", handed_},
                           {"OPENAI_API_KEY", leaked_},
                           {"LC_ALL", "C.UTF-8"}});
  }

  bool tier_unavailable(const CliResult& r) {
    if (r.status != 125 || r.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE") == std::string::npos) return false;
    bool by_design = GetParam() == Identity::Nobody && r.err.find("no cgroup we may write") != std::string::npos;
    if (require_all_tiers() && !by_design) ADD_FAILURE() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but: " << r.err;
    return true;
  }

  // Nothing planted reaches the agent by any route. The operator's key neither: the profile has a
  // model gateway, which this policy (code_network off) gives no door, so the key goes nowhere.
  void expect_blinded(const CliResult& r) {
    for (const auto& [rel, secret] : planted_) {
      EXPECT_EQ(r.out.find(secret), std::string::npos) << rel << " leaked:\n" << r.out;
      EXPECT_EQ(r.err.find(secret), std::string::npos) << rel << " leaked:\n" << r.err;
    }
    EXPECT_NE(r.out.find("FD3=\n"), std::string::npos) << "descriptor 3 carries nothing:\n" << r.out;
    EXPECT_EQ(r.out.find(handed_), std::string::npos) << "the operator's key reached the agent:\n" << r.out;
    EXPECT_NE(r.err.find("variable ANTHROPIC_API_KEY is not handed to the agent: none: the policy's code_network is off"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.out.find(leaked_), std::string::npos) << r.out;
    EXPECT_NE(r.err.find("OPENAI_API_KEY is a credential variable"), std::string::npos) << r.err;
    EXPECT_NE(r.out.find("LC_ALL=C.UTF-8"), std::string::npos) << "a plain --pass-env is passed:\n" << r.out;
  }

  std::unique_ptr<CliFixture> fx_;
  std::unique_ptr<TempDir> home_, bin_;
  std::string agent_, visible_;
  std::map<std::string, std::string> planted_;
  std::string handed_ = "handed-" + random_id(), leaked_ = "leaked-" + random_id();
};

TEST_P(AgentRun, NamespacesTierMasksEveryProfilesCredentialsAgainstEveryRoute) {
  auto r = run({"--", home_->path()}, policy("namespaces", true));
  if (tier_unavailable(r)) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  expect_blinded(r);
  // The home is readable inside: what hides the credentials is the mask, not the home's absence.
  EXPECT_NE(r.out.find(visible_), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("TMPDIR=/tmp/tmp.1\n"), std::string::npos) << r.out;
  // The agent's home is its own scratch directory, never the workspace.
  EXPECT_NE(r.out.find("HOME=/tmp/home.1\n"), std::string::npos) << r.out;
  auto files = fx_->receipts();
  ASSERT_EQ(files.size(), 1u);
  auto rs = read_receipts(files[0]);
  ASSERT_FALSE(rs.empty());
  const Json& open = rs[0];
  EXPECT_EQ(open["kind"], "session.open");
  EXPECT_EQ(open["agent"]["profile"], "claude-code");
  EXPECT_EQ(open["agent"]["confinement"], "engine");
  EXPECT_EQ(open["agent"]["executable"], agent_);
  EXPECT_EQ(open["agent"]["executable_sha256"], *sha256_file(agent_));
  EXPECT_EQ(open["agent"]["airlock_sha256"], *sha256_file(fx_->binary()));
  EXPECT_EQ(open["agent"]["credential"]["source"], "variable ANTHROPIC_API_KEY");
  EXPECT_EQ(open["agent"]["credential"]["delivery"],
            "none: the policy's code_network is off, so the model gateway has no door");
  EXPECT_EQ(open.dump().find(handed_), std::string::npos) << "the credential itself is never recorded";
  EXPECT_EQ(open["policy_digest"].get<std::string>().size(), 64u);
  auto masked = open["enforced"]["namespaces"]["mounts"]["credentials_masked"];
  for (const auto& [rel, _] : planted_)
    EXPECT_NE(std::find(masked.begin(), masked.end(), home_->path() + "/" + rel), masked.end()) << rel;
}

TEST_P(AgentRun, LandlockTierRefusesWhatItCannotHideAndHidesTheRest) {
  auto refused = run({"--", home_->path()}, policy("landlock", true));
  ASSERT_EQ(refused.status, 125) << refused.err;
  EXPECT_NE(refused.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("Landlock cannot hide the credential file " + home_->path()), std::string::npos)
      << refused.err;
  auto r = run({"--", home_->path()}, policy("landlock", false));
  if (tier_unavailable(r)) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  expect_blinded(r);
}

TEST_P(AgentRun, BypassTokensAreRefusedBeforeAnythingStarts) {
  for (const auto& p : policy::builtin_agent_profiles())
    for (const auto& t : p.bypass_tokens)
      for (const std::string& form : {t, t + "=1"}) {
        auto r = fx_->run({"agent", "run", "--profile", p.name, "--executable", agent_, "--", "-p", "hi", form});
        EXPECT_EQ(r.status, 125) << p.name << " " << form;
        EXPECT_NE(r.err.find("airlock: refused: AIRLOCK_BYPASS_REFUSED"), std::string::npos) << r.err;
      }
  auto model = fx_->run({"agent", "run", "--profile", "codex", "--executable", agent_, "--", "-m", "o3"});
  EXPECT_EQ(model.status, 125);
  EXPECT_NE(model.err.find("AIRLOCK_BYPASS_REFUSED"), std::string::npos) << model.err;
  auto resume = fx_->run({"agent", "run", "--profile", "codex", "--executable", agent_, "--", "resume", "--last"});
  EXPECT_NE(resume.err.find("AIRLOCK_BYPASS_REFUSED"), std::string::npos) << resume.err;
  // Nothing started: no session, no receipt.
  EXPECT_TRUE(fx_->receipts().empty());
}

// The design's rule: pinned digests are enforced, not only recorded. A policy pinning the agent
// executable's (or airlock's own) sha256 refuses a mismatch by name before anything starts.
TEST_P(AgentRun, APinnedDigestThatDoesNotMatchIsRefusedBeforeAnythingStarts) {
  auto have = sha256_file(agent_);
  ASSERT_TRUE(have);
  std::string other(64, '0');
  auto pinned = [&](const std::string& key, const std::string& hex) {
    return fx_->write_policy(R"({"schema_version": "airlock.task_policy.v1", "read_only_paths": [")" + bin_->path() +
                                 R"("], "agent": {")" + key + R"(": ")" + hex + R"("}})",
                             "pinned-" + key + ".json");
  };
  for (const std::string key : {"executable_sha256", "airlock_sha256"}) {
    auto r = fx_->run({"agent", "run", "--profile", "claude-code", "--policy", pinned(key, other), "--executable",
                       agent_, "--no-credential", "--", "-p", "hi"});
    EXPECT_EQ(r.status, 125) << key << ": " << r.err;
    EXPECT_NE(r.err.find("airlock: refused: AIRLOCK_CUSTODY_UNSAFE"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("not the " + other + " the policy pins"), std::string::npos) << r.err;
  }
  EXPECT_TRUE(fx_->receipts().empty()) << "nothing starts on a mismatch";
  // The right pin runs.
  auto ok = fx_->run({"agent", "run", "--profile", "claude-code", "--policy", pinned("executable_sha256", *have),
                      "--executable", agent_, "--no-credential", "--", "-p", "hi"});
  if (!tier_unavailable(ok)) {
    EXPECT_EQ(ok.status, 0) << ok.err;
  }
  // A pin that is not a sha256 is a policy error where it is written.
  auto bad = fx_->run({"policy", "check", pinned("executable_sha256", "ABC")});
  EXPECT_EQ(bad.status, 125);
  EXPECT_NE(bad.err.find("$.agent.executable_sha256"), std::string::npos) << bad.err;
}

TEST_P(AgentRun, ConfinementIsEngineOrVendorAndVendorClaimsNothing) {
  auto bad = fx_->write_policy(R"({"schema_version": "airlock.task_policy.v1", "confinement": "sandbox"})", "w.json");
  auto r = fx_->run({"agent", "run", "--profile", "claude-code", "--defaults", bad, "--executable", agent_});
  EXPECT_EQ(r.status, 125);
  EXPECT_NE(r.err.find("AIRLOCK_POLICY_INVALID"), std::string::npos) << r.err;
  EXPECT_TRUE(fx_->receipts().empty());
  auto task = fx_->write_policy(R"({"schema_version": "airlock.task_policy.v1", "confinement": "vendor"})", "t.json");
  r = fx_->run({"agent", "run", "--profile", "claude-code", "--policy", task, "--executable", agent_});
  EXPECT_EQ(r.status, 125);
  EXPECT_NE(r.err.find("confinement is a worker setting"), std::string::npos) << r.err;
  auto vendor = fx_->write_policy(R"({"schema_version": "airlock.task_policy.v1", "confinement": "vendor"})", "v.json");
  auto run = fx_->run({"run", "--defaults", vendor, "--", "/bin/true"});
  EXPECT_EQ(run.status, 125) << "only agent runs take confinement vendor";
  // A harmless executable: under vendor confinement it runs on the host, unconfined by airlock.
  auto v = fx_->run({"agent", "run", "--profile", "claude-code", "--defaults", vendor, "--executable", "/bin/echo",
                     "--no-credential", "--", "vendor-ran"},
                    {{"HOME", home_->path()}});
  ASSERT_EQ(v.status, 0) << v.err;
  EXPECT_TRUE(v.out.ends_with(" vendor-ran\n")) << v.out;  // after the vendor settings airlock composes
  EXPECT_NE(v.err.find("airlock makes no claim the agent is confined"), std::string::npos) << v.err;
  auto files = fx_->receipts();
  ASSERT_EQ(files.size(), 1u);
  auto open = read_receipts(files[0]).at(0);
  EXPECT_EQ(open["agent"]["confinement"], "vendor");
  EXPECT_EQ(open["agent"]["claim"], "airlock makes no claim the agent is confined");
  EXPECT_EQ(open["executor"], "host");
  EXPECT_NE(std::find(open["plan"]["relaxations"].begin(), open["plan"]["relaxations"].end(), "confinement: vendor"),
            open["plan"]["relaxations"].end());
}

// The design's rule: vendor confinement composes the vendor's own strict settings (its sandbox on,
// network off unless the policy allows it, no retry outside the sandbox, its strict-configuration
// mode), records them, and refuses arguments that would override them.
TEST_P(AgentRun, VendorConfinementComposesTheToolsOwnStrictSettings) {
  auto vendor = fx_->write_policy(R"({"schema_version": "airlock.task_policy.v1", "confinement": "vendor"})", "v.json");
  for (const auto& p : policy::builtin_agent_profiles()) {
    auto files_before = fx_->receipts().size();
    auto r = fx_->run({"agent", "run", "--profile", p.name, "--defaults", vendor, "--executable", "/bin/echo",
                       "--no-credential", "--", "TASK"},
                      {{"HOME", home_->path()}});
    ASSERT_EQ(r.status, 0) << p.name << ": " << r.err;
    std::string expected;
    for (const auto& a : p.vendor_settings.network_off) expected += a + " ";
    EXPECT_EQ(r.out, expected + "TASK\n") << p.name;
    auto files = fx_->receipts();
    ASSERT_EQ(files.size(), files_before + 1);
    std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
      return std::filesystem::last_write_time(a) < std::filesystem::last_write_time(b);
    });
    auto open = read_receipts(files.back()).at(0);
    EXPECT_EQ(open["agent"]["vendor_settings"]["arguments"], Json(p.vendor_settings.network_off)) << open.dump();
    EXPECT_EQ(open["agent"]["vendor_settings"]["network"], "off");
    for (const auto& f : p.vendor_settings.reserved_flags) {
      auto over = fx_->run({"agent", "run", "--profile", p.name, "--defaults", vendor, "--executable", "/bin/echo",
                            "--no-credential", "--", f, "x"},
                           {{"HOME", home_->path()}});
      EXPECT_EQ(over.status, 125) << p.name << " " << f;
      EXPECT_NE(over.err.find("would override the settings airlock composes"), std::string::npos) << over.err;
    }
  }
  // The policy allows the network: the tool's sandbox is told so, and nothing else relaxes.
  auto net = fx_->write_policy(R"({"schema_version": "airlock.task_policy.v1", "confinement": "vendor",
    "code_network": {"mode": "allowlist", "rules": [{"host": "api.anthropic.com", "ports": [443]}]}})",
                               "vn.json");
  auto p = *policy::find_agent_profile("codex");
  auto r = fx_->run({"agent", "run", "--profile", "codex", "--defaults", net, "--executable", "/bin/echo",
                     "--no-credential", "--", "TASK"},
                    {{"HOME", home_->path()}});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("sandbox_workspace_write.network_access=true"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--ask-for-approval never"), std::string::npos) << r.out;
  EXPECT_FALSE(policy::check_vendor_args(p, {"--sandbox=danger-full-access"}).has_value());
  EXPECT_TRUE(policy::check_vendor_args(p, {"-m", "o3", "exec", "say --sandbox"}).has_value());
}

// tests/support/scripted_model.py over TLS on loopback, with a certificate of its own for
// 127.0.0.1: the "real model host" the gateway forwards to. Stopped (SIGTERM) when destroyed.
class ScriptedModel {
 public:
  explicit ScriptedModel(const std::string& expect_key) : dir_(std::nullopt, "/var/tmp") {
    ::chmod(dir_.path().c_str(), 0755);
    std::string cert = fmt::format(
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 "
        "-keyout {0}/key.pem -out {0}/cert.pem >/dev/null 2>&1 && chmod 644 {0}/cert.pem",
        dir_.path());
    if (std::system(cert.c_str()) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      std::string script = std::string(AIRLOCK_SOURCE_DIR) + "/tests/support/scripted_model.py";
      ::execlp("python3", "python3", script.c_str(), "--port", "0", "--port-file", (dir_ / "port").c_str(), "--log",
               (dir_ / "log").c_str(), "--tls-cert", (dir_ / "cert.pem").c_str(), "--tls-key",
               (dir_ / "key.pem").c_str(), "--expect-key", expect_key.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 200 && port_ == 0; ++i) {
      std::ifstream f(dir_ / "port");
      if (!(f >> port_)) port_ = 0;
      if (port_ == 0) ::usleep(50 * 1000);
    }
  }
  ~ScriptedModel() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  std::string ca() const { return dir_ / "cert.pem"; }
  std::vector<Json> log() const {
    std::vector<Json> out;
    std::ifstream f(dir_ / "log");
    for (std::string line; std::getline(f, line);)
      if (auto j = Json::parse(line, nullptr, false); !j.is_discarded()) out.push_back(j);
    return out;
  }

 private:
  TempDir dir_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// The secretless route: the agent holds a placeholder and the gateway's URL; the door swaps in the
// operator's key and forwards over verified TLS. A stand-in agent (curl) asks the model, dumps every
// environment it can see, and tries a host the policy does not allow.
TEST_P(AgentRun, TheModelGatewayHoldsTheKeyAndTheAgentOnlyAPlaceholder) {
  ScriptedModel model(handed_);
  ASSERT_GT(model.port(), 0) << "the scripted model server did not start";
  std::string standin = *bin_ / "gateway-agent";
  std::ofstream(standin) << R"sh(#!/bin/sh
echo "HOME=$HOME"
curl -sS -m 30 -H "x-api-key: $ANTHROPIC_API_KEY" -H 'anthropic-version: 2023-06-01'   -H 'content-type: application/json' "$ANTHROPIC_BASE_URL/v1/messages"   -d '{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}'
echo
echo "wrong-key:"; curl -sS -m 30 -o /dev/null -w '%{http_code}\n' -H "x-api-key: sk-own" "$ANTHROPIC_BASE_URL/v1/messages" -d '{}'
echo "forbidden:"; curl -sS -m 10 https://example.org/ 2>&1 | head -2
echo "environ:"; for e in /proc/[0-9]*/environ; do tr '\0' '\n' < "$e"; done 2>/dev/null
echo "home:"; find "$HOME" -type f -exec cat {} + 2>/dev/null
)sh";
  ::chmod(standin.c_str(), 0755);
  std::string pol = fx_->write_policy(fmt::format(
      R"({{"schema_version": "airlock.task_policy.v1", "executor": "namespaces", "read_only_paths": ["{}"],
          "limits": {{"command_timeout_seconds": 90}},
          "code_network": {{"mode": "allowlist", "rules": [{{"cidr": "127.0.0.1/32", "ports": [{}], "schemes": ["https"]}}]}}}})",
      bin_->path(), model.port()));
  auto r = fx_->run({"agent", "run", "--profile", "claude-code", "--policy", pol, "--executable", standin,
                     "--model-upstream", fmt::format("https://127.0.0.1:{}", model.port()), "--model-ca", model.ca(),
                     "--"},
                    {{"HOME", home_->path()}, {"ANTHROPIC_API_KEY", handed_}});
  if (tier_unavailable(r)) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  // The model answered the agent, through the gateway.
  EXPECT_NE(r.out.find("Scripted reply"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("HOME=/tmp/home.1\n"), std::string::npos) << r.out;
  // A request with a key of the agent's own is refused at the door, never forwarded.
  EXPECT_NE(r.out.find("wrong-key:\n403\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CONNECT tunnel failed, response 403"), std::string::npos)
      << "example.org is refused by the door:\n" << r.out;
  // The key: nowhere inside (environment of every process, home, output); the placeholder is.
  EXPECT_EQ(r.out.find(handed_), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ANTHROPIC_API_KEY=airlock-placeholder-"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ANTHROPIC_BASE_URL=http://127.0.0.1:3128"), std::string::npos) << r.out;
  // The model host saw the real key, and only it: never the placeholder, never the agent's own.
  auto log = model.log();
  ASSERT_FALSE(log.empty());
  for (const auto& e : log) {
    if (e.value("path", "").starts_with("/v1/messages")) {
      EXPECT_EQ(e.value("credential", ""), handed_) << e.dump();
    }
  }
  // Receipts: the model request (host, method, path, status, bytes, time; never the key), the
  // refused forbidden host; the credential's route in the first receipt.
  auto files = fx_->receipts();
  ASSERT_EQ(files.size(), 1u);
  auto rs = read_receipts(files[0]);
  EXPECT_EQ(rs.at(0)["agent"]["credential"]["delivery"], "model_gateway");
  int model_requests = 0, refused = 0;
  for (const auto& rc : rs) {
    EXPECT_EQ(rc.dump().find(handed_), std::string::npos) << rc.dump();
    if (rc.value("kind", "") != "door.request") continue;
    if (rc.value("door", "") == "model_gateway" && rc.value("decision", "") == "allowed") {
      ++model_requests;
      EXPECT_EQ(rc.value("status", 0), 200) << rc.dump();
      EXPECT_EQ(rc.value("target", ""), "/v1/messages") << rc.dump();
      EXPECT_EQ(rc.value("method", ""), "POST") << rc.dump();
      EXPECT_GT(rc.value("bytes_down", 0), 0) << rc.dump();
    }
    if (rc.value("target", "") == "example.org:443" && rc.value("decision", "") == "refused") ++refused;
  }
  EXPECT_EQ(model_requests, 1) << "one model request in the receipts";
  EXPECT_EQ(refused, 1) << "the forbidden host's refusal in the receipts";
}

// The real CLIs, installed from the npm registry by scripts/agent-clis (CTest fixture agent_clis).
class RealAgentCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* d = std::getenv("AIRLOCK_TEST_AGENT_CLIS");
    dir_ = d ? d : "";
    if (dir_.empty() || !exists(dir_ + "/.complete")) {
      std::string why = "the real agent CLIs are not installed (scripts/agent-clis DIR, needs npm and the registry)";
      if (require_all_tiers()) FAIL() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but: " << why;
      GTEST_SKIP() << why;
    }
    fx_ = std::make_unique<CliFixture>(Identity::Self);
    // V8 and Bun reserve large address ranges: RLIMIT_AS follows memory_mb.
    policy_ = fx_->write_policy(R"({"schema_version": "airlock.task_policy.v1", "executor": "namespaces",
        "read_only_paths": [")" + dir_ + R"("], "limits": {"memory_mb": 16384, "command_timeout_seconds": 120}})");
  }
  std::string bin(const policy::AgentProfile& p) const { return dir_ + "/node_modules/.bin/" + p.executable; }
  std::string version(const policy::AgentProfile& p) const {
    auto j = Json::parse(read_text(dir_ + "/node_modules/" + p.npm_package + "/package.json"));
    return j["version"];
  }
  CliResult agent(const std::string& profile, const std::vector<std::string>& args) {
    auto p = *policy::find_agent_profile(profile);
    std::vector<std::string> a = {"agent", "run", "--profile", profile, "--policy", policy_, "--executable", bin(p),
                                  "--no-credential", "--"};
    a.insert(a.end(), args.begin(), args.end());
    return fx_->run(a, {{"HOME", home_.path()}}, 180);
  }
  std::string dir_;
  std::unique_ptr<CliFixture> fx_;
  std::string policy_;
  TempDir home_{std::nullopt, "/var/tmp"};
};

// The proof of the secretless route with the real CLIs: each does one scripted task confined on
// the namespaces tier, as root and as an unprivileged user given a delegated cgroup. The model
// (tests/support/scripted_model.py, TLS on loopback, reached only through the door) asks for a file
// to be written, /etc/shadow to be read and a host off the allow-list to be fetched, then ends.
class RealAgentTask : public ::testing::TestWithParam<std::tuple<std::string, Identity>> {};

TEST_P(RealAgentTask, FinishesTheScriptedTaskWithoutEverHoldingItsKey) {
  const auto& [name, identity] = GetParam();
  const char* d = std::getenv("AIRLOCK_TEST_AGENT_CLIS");
  std::string dir = d ? d : "";
  if (dir.empty() || !exists(dir + "/.complete")) {
    std::string why = "the real agent CLIs are not installed (scripts/agent-clis DIR, needs npm and the registry)";
    if (require_all_tiers()) FAIL() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but: " << why;
    GTEST_SKIP() << why;
  }
  std::string why;
  if (!identity_available(identity, &why)) GTEST_SKIP() << why;
  CliFixture fx(identity);
  TempDir home(std::nullopt, "/var/tmp");
  std::string key = "sk-real-" + random_id();
  ScriptedModel model(key);
  ASSERT_GT(model.port(), 0) << "the scripted model server did not start";
  auto p = *policy::find_agent_profile(name);
  std::string pol = fx.write_policy(fmt::format(
      R"({{"schema_version": "airlock.task_policy.v1", "executor": "namespaces", "read_only_paths": ["{}"],
          "limits": {{"memory_mb": 16384, "command_timeout_seconds": 180}},
          "code_network": {{"mode": "allowlist", "rules": [{{"cidr": "127.0.0.1/32", "ports": [{}], "schemes": ["https"]}}]}}}})",
      dir, model.port()));
  std::vector<std::string> args = {"agent", "run", "--profile", name, "--pass-env", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
                                   "--policy", pol, "--workspace", fx.workspace(),
                                   "--executable", dir + "/node_modules/.bin/" + p.executable,
                                   "--model-upstream", fmt::format("https://127.0.0.1:{}", model.port()),
                                   "--model-ca", model.ca(), "--"};
  if (name == "claude-code") {
    for (const char* a : {"-p", "do the task", "--allowedTools", "Bash"}) args.push_back(a);
  } else {
    for (const char* a : {"exec", "--skip-git-repo-check", "-c", "analytics.enabled=false", "-c", "features.plugins=false",
                          "do the task"})
      args.push_back(a);
  }
  auto r = fx.run(args,
                  {{"HOME", home.path()},
                   {p.credential_variables.front(), key},
                   {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"}},
                  240);
  if (r.status == 125 && r.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE") != std::string::npos && !require_all_tiers())
    GTEST_SKIP() << r.err;
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("TASK-DONE"), std::string::npos) << r.out;
  // The file the model asked for is written back.
  std::ifstream result(fx.workspace() + "/result.txt");
  std::string content((std::istreambuf_iterator<char>(result)), {});
  EXPECT_EQ(content, "done\n") << r.err;
  // The model saw every turn, with the real key only (the door put it there), and the results:
  // the shadow read failed inside, the host off the allow-list was refused at the door.
  auto log = model.log();
  int turns = 0;
  std::string last_results;
  for (const auto& e : log) {
    if (e.value("kind", "") != "main") continue;
    ++turns;
    EXPECT_EQ(e.value("credential", ""), p.model_gateway->credential_prefix + key) << e.dump();
    last_results = e["tool_results"].dump();
  }
  EXPECT_EQ(turns, 4) << r.err;
  EXPECT_NE(last_results.find("/etc/shadow: "), std::string::npos) << last_results;
  EXPECT_EQ(last_results.find("root:"), std::string::npos) << last_results;
  EXPECT_NE(last_results.find("response 403"), std::string::npos) << last_results;
  EXPECT_NE(last_results.find("FETCH-REFUSED"), std::string::npos) << last_results;
  // Receipts: each model request, the refused host; never the key.
  auto files = fx.receipts();
  ASSERT_EQ(files.size(), 1u);
  int model_requests = 0, refused = 0;
  for (const auto& rc : read_receipts(files[0])) {
    EXPECT_EQ(rc.dump().find(key), std::string::npos) << rc.dump();
    if (rc.value("kind", "") != "door.request") continue;
    if (rc.value("door", "") == "model_gateway" && rc.value("status", 0) == 200) ++model_requests;
    if (rc.value("target", "") == "example.org:443" && rc.value("decision", "") == "refused") ++refused;
  }
  EXPECT_EQ(model_requests, turns);
  EXPECT_EQ(refused, 1);
}

INSTANTIATE_TEST_SUITE_P(EachCli, RealAgentTask,
                         ::testing::Combine(::testing::Values("claude-code", "codex"),
                                            ::testing::Values(Identity::Self, Identity::Nobody)),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param) == "claude-code" ? "claude" : "codex";
                           return n + (std::get<1>(info.param) == Identity::Self ? "_self" : "_nobody");
                         });

TEST_F(RealAgentCli, EveryBypassArgumentOfEveryProfileIsInItsHelp) {
  for (const auto& p : policy::builtin_agent_profiles()) {
    auto r = fx_->run_program({bin(p), "--help"}, "", {{"HOME", home_.path()}}, 120);
    ASSERT_EQ(r.status, 0) << p.name << ": " << r.err;
    std::string help = r.out + r.err;
    for (const auto& t : p.bypass_tokens) EXPECT_NE(help.find(t), std::string::npos) << p.name << " " << t;
    for (const auto& b : p.bypass_values) {
      EXPECT_NE(help.find(b.flag), std::string::npos) << p.name << " " << b.flag;
      // A value that is a config assignment (codex -c) names a key its help does not list.
      if (b.values[0].find('=') == std::string::npos) {
        EXPECT_NE(help.find(b.values[0]), std::string::npos) << p.name << " " << b.values[0];
      }
    }
    for (const auto& m : p.model_flags) EXPECT_NE(help.find(m), std::string::npos) << p.name << " " << m;
    for (const auto& f : p.resume_flags) EXPECT_NE(help.find(f), std::string::npos) << p.name << " " << f;
    for (const auto& c : p.continue_flags) EXPECT_NE(help.find(c), std::string::npos) << p.name << " " << c;
    // The flags vendor confinement composes are the tool's own.
    for (const auto* list : {&p.vendor_settings.network_off, &p.vendor_settings.network_allowed,
                             &p.vendor_settings.reserved_flags})
      for (const auto& a : *list)
        if (a.starts_with("-")) {
          EXPECT_NE(help.find(a), std::string::npos) << p.name << " " << a;
        }
  }
}

TEST_F(RealAgentCli, VersionAndHelpRunConfinedWithoutNetwork) {
  for (const char* name : {"claude-code", "codex"}) {
    auto p = *policy::find_agent_profile(name);
    auto r = agent(name, {"--version"});
    if (r.status == 125 && r.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE") != std::string::npos && !require_all_tiers())
      GTEST_SKIP() << r.err;
    ASSERT_EQ(r.status, 0) << name << ": " << r.err << r.out;
    EXPECT_NE(r.out.find(version(p)), std::string::npos) << name << ": " << r.out;
    EXPECT_NE(r.err.find("airlock: namespaces tier"), std::string::npos) << r.err;
    auto h = agent(name, {"--help"});
    ASSERT_EQ(h.status, 0) << name << ": " << h.err;
    EXPECT_NE(h.out.find(p.bypass_tokens[0]), std::string::npos) << h.out;
  }
  auto files = fx_->receipts();
  ASSERT_EQ(files.size(), 4u);
  for (const auto& f : files) {
    auto open = read_receipts(f).at(0);
    EXPECT_EQ(open["executor"], "namespaces");
    EXPECT_EQ(open["enforced"]["network"], "none");
    EXPECT_EQ(open["agent"]["executable_sha256"], *sha256_file(open["agent"]["executable"]));
  }
}

// The tier an unprivileged user without a delegated cgroup gets: Claude Code's runtime (Bun's
// JavaScriptCore) aborted there without its own /proc/self/maps; it now starts, and Codex too.
TEST_F(RealAgentCli, BothStartOnTheLandlockTier) {
  std::string pol = fx_->write_policy(R"({"schema_version": "airlock.task_policy.v1", "executor": "landlock",
      "read_only_paths": [")" + dir_ + R"("], "limits": {"memory_mb": 16384, "command_timeout_seconds": 120}})",
                                      "landlock.json");
  for (const char* name : {"claude-code", "codex"}) {
    auto p = *policy::find_agent_profile(name);
    auto r = fx_->run({"agent", "run", "--profile", name, "--policy", pol, "--executable", bin(p), "--no-credential",
                       "--", "--version"},
                      {{"HOME", home_.path()}}, 180);
    if (r.status == 125 && r.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE") != std::string::npos && !require_all_tiers())
      GTEST_SKIP() << r.err;
    ASSERT_EQ(r.status, 0) << name << ": " << r.err << r.out;
    EXPECT_NE(r.out.find(version(p)), std::string::npos) << name << ": " << r.out;
    EXPECT_NE(r.err.find("airlock: landlock tier"), std::string::npos) << r.err;
  }
}

TEST_F(RealAgentCli, EachBypassArgumentInBothFormsIsRefused) {
  for (const char* name : {"claude-code", "codex", "gemini"}) {
    auto p = *policy::find_agent_profile(name);
    std::vector<std::vector<std::string>> attempts;
    for (const auto& t : p.bypass_tokens) attempts.push_back({t}), attempts.push_back({t + "=true"});
    for (const auto& b : p.bypass_values)
      for (const auto& v : b.values) attempts.push_back({b.flag, v}), attempts.push_back({b.flag + "=" + v});
    for (const auto& a : attempts) {
      auto r = agent(name, a);
      EXPECT_EQ(r.status, 125) << name << " " << a[0];
      EXPECT_NE(r.err.find("AIRLOCK_BYPASS_REFUSED"), std::string::npos) << r.err;
    }
  }
  EXPECT_TRUE(fx_->receipts().empty());
}

INSTANTIATE_TEST_SUITE_P(AsEachUser, AgentRun, ::testing::Values(Identity::Self, Identity::Nobody),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace airlock::testing
