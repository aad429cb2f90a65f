// The run store through the real `airlock` binary: runs recorded, slots refused past capacity,
// a killed holder finalised, machine rows judged, and two machines sharing one PostgreSQL.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/custody.h"
#include "base/encoding.h"
#include "base/signing.h"
#include "cli_support.h"
#include "store/store.h"
#include "store_backend.h"

namespace airlock::testing {
namespace {

using Json = nlohmann::json;

// `airlock ARGS...` started in the background as the fixture's identity (self), its stderr to
// `log`. The fixture's run() blocks; these tests need holders that outlive the call.
pid_t spawn(const CliFixture& fx, const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv = {fx.binary(), "--state-dir", fx.state_dir()};
  argv.insert(argv.end(), args.begin(), args.end());
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(fd, 2);
    std::vector<char*> av;
    for (auto& a : argv) av.push_back(a.data());
    av.push_back(nullptr);
    char env0[] = "PATH=/usr/bin:/bin";
    char* ev[] = {env0, nullptr};
    ::execve(av[0], av.data(), ev);
    ::_exit(123);
  }
  return pid;
}

Json runs_json(CliFixture& fx, const std::vector<std::string>& pre, bool live) {
  std::vector<std::string> args = pre;
  for (const char* a : {"runs", "list", "--json"}) args.push_back(a);
  if (live) args.push_back("--live");
  auto r = fx.run(args);
  EXPECT_EQ(r.status, 0) << r.err;
  Json j = Json::parse(r.out, nullptr, false);
  return j.is_discarded() ? Json{{"runs", Json::array()}} : j;
}

// Waits (bounded) until the store shows `n` live runs whose session has said what enforced.
bool wait_live(CliFixture& fx, const std::vector<std::string>& pre, size_t n) {
  for (int i = 0; i < 600; ++i) {
    Json j = runs_json(fx, pre, true);
    size_t enforced = 0;
    for (const auto& r : j["runs"]) enforced += !r["executor"].is_null();
    if (j["runs"].size() == n && enforced == n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(StoreCli, ARunRecordsItsSeatWhatEnforcedAndItsOutcome) {
  CliFixture fx(Identity::Self);
  auto r = fx.run({"run", "-q", "--", "/bin/sh", "-c", "exit 3"});
  ASSERT_EQ(r.status, 3) << r.err;
  Json all = runs_json(fx, {}, false);
  ASSERT_EQ(all["runs"].size(), 1u) << all.dump();
  const Json& run = all["runs"][0];
  EXPECT_EQ(run["slot"], "default");
  EXPECT_EQ(run["ordinal"], 0);
  EXPECT_EQ(run["outcome"], "exit 3");
  EXPECT_EQ(run["live"], false);
  EXPECT_FALSE(run["executor"].is_null());
  EXPECT_EQ(run["policy_digest"].get<std::string>().size(), 64u);
  EXPECT_TRUE(run["kernel_facts"].contains("landlock_abi"));
  EXPECT_EQ(runs_json(fx, {}, true)["runs"].size(), 0u);
  auto show = fx.run({"runs", "show", run["id"].get<std::string>()});
  ASSERT_EQ(show.status, 0) << show.err;
  EXPECT_NE(show.out.find("exit 3"), std::string::npos) << show.out;
  auto missing = fx.run({"runs", "show", "no-such-run"});
  EXPECT_EQ(missing.status, 125);
  EXPECT_NE(missing.err.find("AIRLOCK_NOT_FOUND"), std::string::npos) << missing.err;
}

TEST(StoreCli, ADeclaredSlotRefusesPastCapacityAndAKilledHolderIsFinalised) {
  CliFixture fx(Identity::Self);
  TempDir logs;
  ASSERT_EQ(fx.run({"slot", "set", "one", "--max-sessions", "1"}).status, 0);
  pid_t holder = spawn(fx, {"run", "-q", "--slot", "one", "--", "sleep", "30"}, logs / "holder.log");
  ASSERT_TRUE(wait_live(fx, {}, 1)) << read_text(logs / "holder.log");
  std::string held = runs_json(fx, {}, true)["runs"][0]["id"];

  auto refused = fx.run({"run", "-q", "--slot", "one", "--", "true"});
  EXPECT_EQ(refused.status, 125);
  EXPECT_NE(refused.err.find("AIRLOCK_CAPACITY_EXHAUSTED"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("carries 1 of 1 runs"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find(held), std::string::npos) << "the current holder is named: " << refused.err;

  // airlock dies outright: it releases nothing. A listing shows it dead, not live (it once showed
  // it live until a reservation collided with it), and the next reservation finalises it.
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  EXPECT_EQ(runs_json(fx, {}, true)["runs"].size(), 0u) << "a dead holder is listed as live";
  Json all = runs_json(fx, {}, false);
  ASSERT_EQ(all["runs"].size(), 1u) << all.dump();
  EXPECT_EQ(all["runs"][0]["holder_alive"], false) << all.dump();
  EXPECT_TRUE(all["runs"][0]["finished_at_ms"].is_null()) << "a listing wrote: " << all.dump();
  auto next = fx.run({"run", "-q", "--slot", "one", "--", "true"});
  EXPECT_EQ(next.status, 0) << next.err;
  auto show = fx.run({"runs", "show", "--json", held});
  Json old = Json::parse(show.out, nullptr, false);
  EXPECT_EQ(old["outcome"], "holder_dead") << show.out;
  EXPECT_EQ(runs_json(fx, {}, true)["runs"].size(), 0u);
}

TEST(StoreCli, MachineProbeRecordsMeasuredFactsAndATamperedRowIsNotBelieved) {
  CliFixture fx(Identity::Self);
  // No fleet key, no signed row: the probe refuses to write one nobody could check.
  auto unsigned_probe = fx.run({"machine", "probe", "--json"});
  EXPECT_EQ(unsigned_probe.status, 125) << unsigned_probe.err;
  EXPECT_NE(unsigned_probe.err.find("airlock fleet init"), std::string::npos) << unsigned_probe.err;
  auto init = fx.run({"fleet", "init", "--json"});
  ASSERT_EQ(init.status, 0) << init.err;
  std::string key = Json::parse(init.out)["fleet_key"];
  struct stat st{};
  ASSERT_EQ(::stat(key.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 32);
  auto again = fx.run({"fleet", "init"});
  EXPECT_EQ(again.status, 125) << "a fleet key was replaced: " << again.out;
  EXPECT_NE(again.err.find("exists already"), std::string::npos) << again.err;
  auto probe = fx.run({"machine", "probe", "--json"});
  ASSERT_EQ(probe.status, 0) << probe.err;
  Json row = Json::parse(probe.out);
  EXPECT_EQ(row["believed"], true);
  EXPECT_EQ(row["facts"]["landlock_abi"], row["landlock_abi"]);

  auto r = fx.run({"machine", "list", "--json"});
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(Json::parse(r.out)["machines"][0]["believed"], true);
  // Someone with the database claims a Landlock ABI this build does not know.
  sqlite_exec(fx.state_dir() + "/airlock.db",
              "UPDATE machines SET landlock_abi = 99, facts = json_set(facts, '$.landlock_abi', 99)");
  r = fx.run({"machine", "list", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  Json m = Json::parse(r.out)["machines"][0];
  EXPECT_EQ(m["believed"], false);
  // The changed row no longer carries the fleet key's signature: that is said first, by name.
  EXPECT_EQ(m["not_believed"]["reason"], "signature_invalid") << m;
  auto text = fx.run({"machine", "list"});
  EXPECT_NE(text.out.find("NOT BELIEVED (signature_invalid"), std::string::npos) << text.out;
  // Even signed with the fleet key, a row claiming a Landlock ABI this build does not know is not believed.
  {
    auto store = store::Store::open(fx.state_dir() + "/airlock.db");
    ASSERT_TRUE(store.has_value()) << store.error().message;
    auto rows = (*store)->machines();
    ASSERT_TRUE(rows.has_value() && rows->size() == 1u);
    auto seed = read_key_file(key, ::geteuid(), kEd25519SeedBytes);
    ASSERT_TRUE(seed.has_value()) << seed.error().message;
    store::MachineRecord forged = (*rows)[0];
    forged.signature = base64_encode(*ed25519_sign(*seed, forged.signed_text()));
    ASSERT_TRUE((*store)->put_machine(forged).has_value());
  }
  m = Json::parse(fx.run({"machine", "list", "--json"}).out)["machines"][0];
  EXPECT_EQ(m["not_believed"]["reason"], "landlock_abi_above_known") << m;
  // Re-signed by whoever holds the key, the row is judged on its facts again.
  fx.run({"machine", "probe"});
  sqlite_exec(fx.state_dir() + "/airlock.db", "UPDATE machines SET signature = ''");
  m = Json::parse(fx.run({"machine", "list", "--json"}).out)["machines"][0];
  EXPECT_EQ(m["not_believed"]["reason"], "unsigned") << m;
  // A machine that holds no fleet key, nor a trusted public key, believes no row.
  ::unlink(key.c_str());
  ::unlink((key.substr(0, key.rfind('/')) + "/signing.pub").c_str());
  m = Json::parse(fx.run({"machine", "list", "--json"}).out)["machines"][0];
  EXPECT_EQ(m["not_believed"]["reason"], "no_fleet_key") << m;
}

// A machine added with its ssh transport is recorded and signed, judged never probed; targets
// ssh could read as options, and identity files open to others, are refused by name.
TEST(StoreCli, MachineAddRecordsItsTransportSignedAndRefusesWhatSshWouldMisread) {
  CliFixture fx(Identity::Self);
  auto no_fleet = fx.run({"machine", "add", "build-1", "--ssh", "ci@10.0.0.7"});
  EXPECT_EQ(no_fleet.status, 125) << no_fleet.err;
  ASSERT_EQ(fx.run({"fleet", "init"}).status, 0);
  std::string identity = fx.workspace() + "/../id_ed25519";
  std::ofstream(identity) << "not really a key\n";
  ::chmod(identity.c_str(), 0600);
  auto added = fx.run({"machine", "add", "build-1", "--ssh", "ci@10.0.0.7:2222", "--identity", identity, "--json"});
  ASSERT_EQ(added.status, 0) << added.err;
  auto list = fx.run({"machine", "list", "--json"});
  ASSERT_EQ(list.status, 0) << list.err;
  Json m = Json::parse(list.out)["machines"][0];
  EXPECT_EQ(m["id"], "build-1");
  EXPECT_EQ(m["transport"]["ssh"], "ci@10.0.0.7:2222");
  EXPECT_EQ(m["transport"]["identity"], std::filesystem::canonical(identity).string()) << "kept as its absolute path";
  EXPECT_EQ(m["signature"], "verified");
  EXPECT_EQ(m["not_believed"]["reason"], "never_probed") << m;
  EXPECT_EQ(fx.run({"machine", "add", "b6", "--ssh", "ci@[fd00::7]"}).status, 0);
  // An old signed row put back after a newer one was seen here is replayed, not believed.
  std::string db = fx.state_dir() + "/airlock.db";
  sqlite_exec(db, "CREATE TABLE saved AS SELECT transport, signature, signed_at FROM machines WHERE id = 'b6'");
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(fx.run({"machine", "add", "b6", "--ssh", "ci@[fd00::8]"}).status, 0);
  ASSERT_EQ(fx.run({"machine", "list"}).status, 0);  // the newer signature is seen here
  sqlite_exec(db, "UPDATE machines SET (transport, signature, signed_at) = (SELECT transport, signature, signed_at "
                  "FROM saved) WHERE id = 'b6'");
  Json replay = Json::parse(fx.run({"machine", "list", "--json"}).out);
  for (const Json& row : replay["machines"])
    if (row["id"] == "b6") {
      EXPECT_EQ(row["not_believed"]["reason"], "replayed") << row;
      EXPECT_EQ(row["transport"]["ssh"], "ci@[fd00::7]:22") << row;
    }
  // The transport is covered by the signature: pointing the row elsewhere breaks it.
  sqlite_exec(fx.state_dir() + "/airlock.db", "UPDATE machines SET transport = '{\"ssh\":\"ci@evil:22\"}' WHERE id = 'build-1'");
  Json listed = Json::parse(fx.run({"machine", "list", "--json"}).out);  // not a temporary's member: GCC 12
  for (const Json& row : listed["machines"])
    if (row["id"] == "build-1") {
      EXPECT_EQ(row["not_believed"]["reason"], "signature_invalid") << row;
    }
  for (const char* target : {"-oProxyCommand=sh@x", "ci@-oProxyCommand=x", "ci@", "host", "ci@host:0", "ci@host:65536",
                             "ci@host:22x", "c i@host", "ci@ho;st", "ci@[::1", "ci@[::1]x"}) {
    auto r = fx.run({"machine", "add", "m", "--ssh", target});
    EXPECT_EQ(r.status, 125) << target << ": " << r.out;
    EXPECT_NE(r.err.find("AIRLOCK_OPTION_INVALID"), std::string::npos) << target << ": " << r.err;
  }
  EXPECT_EQ(fx.run({"machine", "add", "bad name", "--ssh", "ci@host"}).status, 125);
  // This machine's own row, probed, is not replaced by an unmeasured one.
  ASSERT_EQ(fx.run({"machine", "probe"}).status, 0);
  std::string self_id = Json::parse(fx.run({"machine", "probe", "--json"}).out)["id"];
  auto over = fx.run({"machine", "add", self_id, "--ssh", "ci@host"});
  EXPECT_EQ(over.status, 125) << over.out;
  EXPECT_NE(over.err.find("measured facts"), std::string::npos) << over.err;
  // An added, never probed one may be added again (its transport corrected).
  EXPECT_EQ(fx.run({"machine", "add", "build-1", "--ssh", "ci@10.0.0.8"}).status, 0);
  ::chmod(identity.c_str(), 0644);
  auto open_key = fx.run({"machine", "add", "m2", "--ssh", "ci@host", "--identity", identity});
  EXPECT_EQ(open_key.status, 125);
  EXPECT_NE(open_key.err.find("AIRLOCK_CUSTODY_UNSAFE"), std::string::npos) << open_key.err;
}

// Columns a writer never writes (JSON nested 100,000 deep or with a key twice, an integer with
// text after it, an id two rows have, a NUL or an escape sequence in a name) are judged, never
// crash the reader or forge the table; a machine that signs nothing checks rows with the trusted
// public key.
TEST(StoreCli, MalformedRowsAreJudgedNotBelievedAndAMachineCanCheckWithThePublicKeyAlone) {
  CliFixture fx(Identity::Self);
  auto init = fx.run({"fleet", "init", "--json"});
  ASSERT_EQ(init.status, 0) << init.err;
  std::string pub = Json::parse(init.out)["public_key"];
  ASSERT_EQ(fx.run({"machine", "probe"}).status, 0);
  std::string db = fx.state_dir() + "/airlock.db";
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  sqlite_exec(db, "INSERT INTO machines SELECT 'deep', hostname, landlock_abi, '" + deep + "', probed_at, transport, "
                  "signature, signed_at, attestation FROM machines LIMIT 1");
  sqlite_exec(db, "INSERT INTO machines SELECT 'dup', hostname, landlock_abi, '{\"landlock_abi\":1,' || substr(facts, 2), "
                  "probed_at, transport, signature, signed_at, attestation FROM machines WHERE id NOT IN ('deep') LIMIT 1");
  sqlite_exec(db, "INSERT INTO machines SELECT 'abi', hostname, landlock_abi || 'abc', facts, probed_at, transport, "
                  "signature, signed_at, attestation FROM machines WHERE id NOT IN ('deep', 'dup') LIMIT 1");
  sqlite_exec(db, "INSERT INTO machines VALUES ('fake' || char(0) || ' ok', 'h' || char(27) || '[2K', 1, 'null', 0, '{}', '', 0, 'null')");
  auto list = fx.run({"machine", "list", "--json"});
  ASSERT_EQ(list.status, 0) << list.err;
  std::map<std::string, std::string> reasons;
  Json rows = Json::parse(list.out)["machines"];
  for (const Json& row : rows) reasons[row["id"]] = row.value("not_believed", Json::object()).value("reason", "believed");
  EXPECT_EQ(reasons["deep"], "row_malformed");
  EXPECT_EQ(reasons["dup"], "row_malformed");
  EXPECT_EQ(reasons["abi"], "row_malformed");
  auto text = fx.run({"machine", "list"});
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_EQ(text.out.find('\x1b'), std::string::npos) << "an escape sequence reached the terminal";
  EXPECT_NE(text.out.find("NOT BELIEVED (unsigned"), std::string::npos) << text.out;
  // Another machine, with the public key alone: it checks, it cannot sign.
  CliFixture other(Identity::Self);
  ASSERT_EQ(other.run({"fleet", "trust", pub}).status, 0);
  auto checked = other.run({"--store", db, "machine", "list", "--json"});
  ASSERT_EQ(checked.status, 0) << checked.err;
  size_t verified = 0;
  Json checked_rows = Json::parse(checked.out)["machines"];  // not a temporary's member: GCC 12
  for (const Json& row : checked_rows) verified += row["believed"] == true;
  EXPECT_EQ(verified, 1u) << checked.out;
  auto sign = other.run({"--store", db, "machine", "probe"});
  EXPECT_EQ(sign.status, 125) << "a machine without the key signed a row";
  EXPECT_EQ(other.run({"fleet", "trust", "not-a-key"}).status, 125);
  // An identity that is a link is refused; a real one is kept as its absolute path.
  std::string key = fx.workspace() + "/../id_test", link = fx.workspace() + "/../id_link";
  std::ofstream(key) << "k\n";
  ::chmod(key.c_str(), 0600);
  ASSERT_EQ(::symlink(key.c_str(), link.c_str()), 0);
  auto linked = fx.run({"machine", "add", "m1", "--ssh", "ci@host", "--identity", link});
  EXPECT_EQ(linked.status, 125);
  EXPECT_NE(linked.err.find("AIRLOCK_CUSTODY_UNSAFE"), std::string::npos) << linked.err;
  auto non_utf8 = fx.run({"machine", "add", "m1", "--ssh", "ci@host", "--identity", key + "\xff"});
  EXPECT_EQ(non_utf8.status, 125);
  EXPECT_NE(non_utf8.err.find("AIRLOCK_OPTION_INVALID"), std::string::npos) << non_utf8.err;
}

TEST(StoreCli, ABadStoreUrlIsAnInvalidOptionAndAnAbsentServerIsUnreachable) {
  CliFixture fx(Identity::Self);
  auto r = fx.run({"--store", "mysql://db", "runs", "list"});
  EXPECT_EQ(r.status, 125);
  EXPECT_NE(r.err.find("AIRLOCK_OPTION_INVALID"), std::string::npos) << r.err;
  auto run = fx.run({"--store", "postgresql:///x?host=/nonexistent-airlock-dir", "run", "--", "true"});
  EXPECT_EQ(run.status, 125);
  EXPECT_NE(run.err.find("AIRLOCK_SERVER_UNREACHABLE: cannot connect"), std::string::npos) << run.err;
}

TEST(StoreCli, TwoMachinesSharingOnePostgresqlNeverOverAdmit) {
  std::string why;
  auto db = BackendDb::make("postgresql", &why);
  if (!db) {
    if (require_all_tiers()) FAIL() << "postgresql required (AIRLOCK_REQUIRE_ALL_TIERS=1): " << why;
    GTEST_SKIP() << "postgresql unavailable: " << why;
  }
  CliFixture fx(Identity::Self);
  TempDir logs;
  std::vector<std::string> store = {"--store", db->url()};
  auto as = [&](const std::string& machine, std::vector<std::string> args) {
    std::vector<std::string> all = store;
    all.insert(all.end(), {"--machine-id", machine});
    all.insert(all.end(), args.begin(), args.end());
    return all;
  };
  ASSERT_EQ(fx.run(as("m-a", {"slot", "set", "gpu", "--max-sessions", "2"})).status, 0);
  // Six dispatchers, three acting as m-a and three as m-b, all for m-a's slot `gpu`.
  std::vector<pid_t> pids;
  for (int i = 0; i < 6; ++i)
    pids.push_back(spawn(fx,
                         as(i % 2 ? "m-b" : "m-a", {"run", "-q", "--slot", "m-a:gpu", "--", "sleep", "30"}),
                         logs / ("d" + std::to_string(i) + ".log")));
  // The losers are refused at once; the winners hold their seats for 30 s, so no seat frees
  // while the others try: exactly two may be admitted.
  std::vector<pid_t> refused, running = pids;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  while (refused.size() < 4 && std::chrono::steady_clock::now() < deadline) {
    for (auto it = running.begin(); it != running.end();) {
      int st = 0;
      if (::waitpid(*it, &st, WNOHANG) == *it) {
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 125);
        refused.push_back(*it);
        it = running.erase(it);
      } else {
        ++it;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(refused.size(), 4u);
  EXPECT_EQ(running.size(), 2u);
  for (pid_t p : refused) {
    size_t i = static_cast<size_t>(std::find(pids.begin(), pids.end(), p) - pids.begin());
    std::string err = read_text(logs / ("d" + std::to_string(i) + ".log"));
    EXPECT_NE(err.find("AIRLOCK_CAPACITY_EXHAUSTED: slot \"gpu\" on machine m-a carries 2 of 2 runs"),
              std::string::npos)
        << err;
  }
  EXPECT_TRUE(wait_live(fx, store, 2));
  Json live = runs_json(fx, store, true);
  EXPECT_EQ(live["runs"].size(), 2u) << live.dump();
  // A signal stops the winners; each releases its seat with that outcome.
  for (pid_t p : running) ::kill(p, SIGTERM);
  for (pid_t p : running) {
    int st = 0;
    ::waitpid(p, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 125);
  }
  EXPECT_EQ(runs_json(fx, store, true)["runs"].size(), 0u);
  Json all = runs_json(fx, store, false);
  EXPECT_EQ(all["runs"].size(), 2u);
  for (const auto& r : all["runs"]) EXPECT_EQ(r["outcome"], "AIRLOCK_SESSION_KILLED");
}

}  // namespace
}  // namespace airlock::testing
