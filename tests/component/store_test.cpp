// The run store against real backends (a SQLite file, a PostgreSQL server): capacity races
// between processes, dead holders, migrations and a newer schema refused by name.
#include "store/store.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "cli_support.h"
#include "store_backend.h"

namespace airlock::store {
namespace {

using testing::BackendDb;

class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    db_ = BackendDb::make(GetParam(), &why);
    if (!db_) {
      if (testing::require_all_tiers())
        FAIL() << GetParam() << " required (AIRLOCK_REQUIRE_ALL_TIERS=1): " << why;
      GTEST_SKIP() << GetParam() << " unavailable: " << why;
    }
  }
  std::unique_ptr<Store> open(StoreOptions o = {}) {
    auto s = Store::open(db_->url(), o);
    if (!s) ADD_FAILURE() << s.error().to_json().dump();
    return s ? std::move(*s) : nullptr;
  }
  std::unique_ptr<BackendDb> db_;
};

// A child process that holds what it reserved until told to let go.
struct Child {
  pid_t pid = -1;
};

// Reads one line per child from `fd` until `n` lines or a minute passes.
std::vector<std::string> read_lines(int fd, size_t n) {
  std::vector<std::string> lines;
  std::string buf;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (lines.size() < n && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) continue;
    char chunk[4096];
    ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got <= 0) break;
    buf.append(chunk, static_cast<size_t>(got));
    for (auto nl = buf.find('\n'); nl != std::string::npos; nl = buf.find('\n')) {
      lines.push_back(buf.substr(0, nl));
      buf.erase(0, nl + 1);
    }
  }
  return lines;
}

// `n` processes reserve a seat in `slot` at once; each reports "OK id" or "REFUSED code message"
// on one line and holds its seat until `release` is closed, then finishes its run.
struct Race {
  std::vector<pid_t> pids;
  std::vector<std::string> lines;
  int release_w = -1;
};

Race start_race(const std::string& url, const RunRequest& proto, int n,
                const std::string& holder_machine_prefix = "") {
  Race race;
  int results[2], release[2];
  EXPECT_EQ(::pipe(results), 0);
  EXPECT_EQ(::pipe(release), 0);
  for (int i = 0; i < n; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(results[0]);
      ::close(release[1]);
      RunRequest req = proto;
      // Separate processes each with their own connection: nothing shared but the database.
      req.holder =
          Holder::self(holder_machine_prefix.empty() ? proto.holder.machine_id
                                                     : holder_machine_prefix + std::to_string(i % 2));
      std::string line;
      std::string id;
      auto s = Store::open(url);
      if (!s) {
        line = "ERROR " + s.error().message + "\n";
      } else if (auto r = (*s)->reserve(req); r) {
        id = r->id;
        line = "OK " + r->id + "\n";
      } else {
        line = fmt::format("REFUSED {} {}\n", to_name(r.error().code), r.error().message);
      }
      (void)!::write(results[1], line.data(), line.size());  // one write under PIPE_BUF: atomic
      char c;
      while (::read(release[0], &c, 1) > 0) {
      }
      if (s && !id.empty()) (void)(*s)->finish(id, "exit 0");
      ::_exit(0);
    }
    race.pids.push_back(pid);
  }
  ::close(results[1]);
  ::close(release[0]);
  race.lines = read_lines(results[0], static_cast<size_t>(n));
  ::close(results[0]);
  race.release_w = release[1];
  return race;
}

void end_race(Race& race) {
  ::close(race.release_w);
  for (pid_t p : race.pids) {
    int st = 0;
    ASSERT_EQ(::waitpid(p, &st, 0), p);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
}

size_t live_in(Store& s, const std::string& slot) {
  auto runs = s.runs(true);
  EXPECT_TRUE(runs.has_value());
  size_t n = 0;
  for (const auto& r : *runs) n += r.slot == slot;
  return n;
}

TEST_P(StoreTest, FiftyProcessesRacingForThreeSeatsAdmitExactlyThree) {
  auto s = open();
  ASSERT_TRUE(s);
  constexpr int kRounds = 6;
  for (int round = 0; round < kRounds; ++round) {
    std::string slot = "race" + std::to_string(round);
    ASSERT_TRUE(s->set_slot({"m-a", slot, 3}).has_value());
    Race race = start_race(db_->url(), {"m-a", slot, "digest", Holder{"m-a", 0, 0}}, 50);
    ASSERT_EQ(race.lines.size(), 50u);
    int ok = 0, refused = 0;
    for (const auto& l : race.lines) {
      if (l.starts_with("OK "))
        ++ok;
      else if (l.starts_with("REFUSED AIRLOCK_CAPACITY_EXHAUSTED ") &&
               l.find("carries 3 of 3 runs") != std::string::npos)
        ++refused;
      else
        ADD_FAILURE() << "round " << round << ": " << l;
    }
    EXPECT_EQ(ok, 3) << "round " << round;
    EXPECT_EQ(refused, 47) << "round " << round;
    // The database agrees: three live runs, on seats 0, 1 and 2.
    auto live = s->runs(true);
    ASSERT_TRUE(live.has_value());
    std::set<int> seats;
    for (const auto& r : *live)
      if (r.slot == slot) seats.insert(r.ordinal);
    EXPECT_EQ(seats, (std::set<int>{0, 1, 2})) << "round " << round;
    end_race(race);
    EXPECT_EQ(live_in(*s, slot), 0u);
  }
}

TEST_P(StoreTest, TwoMachinesRacingForOneMachinesSlotNeverOverAdmit) {
  auto s = open();
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->set_slot({"m-a", "gpu", 2}).has_value());
  // Holders alternate between machines m-x0 and m-x1; the slot is m-a's.
  Race race = start_race(db_->url(), {"m-a", "gpu", "digest", Holder{"m-x0", 0, 0}}, 20, "m-x");
  ASSERT_EQ(race.lines.size(), 20u);
  int ok = 0;
  for (const auto& l : race.lines) {
    if (l.starts_with("OK "))
      ++ok;
    else
      EXPECT_NE(l.find("carries 2 of 2 runs"), std::string::npos) << l;
  }
  EXPECT_EQ(ok, 2);
  EXPECT_EQ(live_in(*s, "gpu"), 2u);
  end_race(race);
}

TEST_P(StoreTest, AHolderKilledWithSigkillIsFinalisedByTheNextReservation) {
  auto s = open();
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->set_slot({"m-a", "solo", std::nullopt}).has_value());  // no max_sessions: one seat
  for (bool reap_first : {true, false}) {
    Race race = start_race(db_->url(), {"m-a", "solo", "digest", Holder{"m-a", 0, 0}}, 1);
    ASSERT_EQ(race.lines.size(), 1u);
    ASSERT_TRUE(race.lines[0].starts_with("OK ")) << race.lines[0];
    std::string dead_id = race.lines[0].substr(3);

    // While the holder lives, the seat is its: refused, naming the holder.
    auto refused = s->reserve({"m-a", "solo", "digest", Holder::self("m-a")});
    ASSERT_FALSE(refused.has_value());
    EXPECT_EQ(refused.error().code, Code::CapacityExhausted);
    EXPECT_NE(refused.error().message.find("carries 1 of 1 runs"), std::string::npos)
        << refused.error().message;
    EXPECT_NE(refused.error().message.find(dead_id), std::string::npos) << refused.error().message;

    ::kill(race.pids[0], SIGKILL);
    siginfo_t info{};
    // Reaped, or left a zombie (waited for without reaping): dead either way.
    ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(race.pids[0]), &info, WEXITED | (reap_first ? 0 : WNOWAIT)),
              0);
    auto next = s->reserve({"m-a", "solo", "digest", Holder::self("m-a")});
    ASSERT_TRUE(next.has_value()) << next.error().to_json().dump();
    EXPECT_EQ(next->ordinal, 0);
    auto dead = s->run(dead_id);
    ASSERT_TRUE(dead.has_value() && dead->has_value());
    EXPECT_FALSE((*dead)->live());
    EXPECT_EQ((*dead)->outcome, "holder_dead");
    ASSERT_TRUE(s->finish(next->id, "exit 0").has_value());
    ::close(race.release_w);
    if (!reap_first) ::waitpid(race.pids[0], nullptr, 0);
  }
}

TEST_P(StoreTest, AHolderOnAnotherMachineIsDeadOnlyOnceItsHeartbeatExpired) {
  auto s = open();
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->set_slot({"m-a", "one", 1}).has_value());
  // Held from machine m-b by a process this machine cannot see; m-a reserves next.
  Race race = start_race(db_->url(), {"m-a", "one", "digest", Holder{"m-b", 0, 0}}, 1);
  ASSERT_TRUE(race.lines[0].starts_with("OK ")) << race.lines[0];
  auto fresh = s->reserve({"m-a", "one", "digest", Holder::self("m-a")});
  ASSERT_FALSE(fresh.has_value());
  EXPECT_EQ(fresh.error().code, Code::CapacityExhausted);
  EXPECT_EQ(fresh.error().facts["holders"][0]["machine"], "m-b");

  // Ten minutes on (the clock driven, not waited for), its heartbeat is older than the expiry:
  // finalised by id, and the seat is taken.
  set_clock_for_tests([] {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               (std::chrono::system_clock::now() + std::chrono::minutes(10)).time_since_epoch())
        .count();
  });
  auto taken = s->reserve({"m-a", "one", "digest", Holder::self("m-a")});
  set_clock_for_tests(nullptr);
  ASSERT_TRUE(taken.has_value()) << taken.error().to_json().dump();
  auto old = s->run(race.lines[0].substr(3));
  ASSERT_TRUE(old.has_value() && old->has_value());
  EXPECT_EQ((*old)->outcome, "holder_dead");
  end_race(race);
}

TEST_P(StoreTest, ASeatBeatsWhileHeldAndReleasesWithItsOutcome) {
  auto s = open({.heartbeat_expiry_ms = 40});
  ASSERT_TRUE(s);
  auto seat = Seat::reserve(*s, {"m-a", kDefaultSlot, "digest", Holder::self("m-a")});
  ASSERT_TRUE(seat.has_value()) << seat.error().to_json().dump();
  std::string id = (*seat)->run().id;
  int64_t first = (*seat)->run().heartbeat_at_ms;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int64_t latest = first;
  while (latest == first && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    latest = (**s->run(id)).heartbeat_at_ms;
  }
  EXPECT_GT(latest, first);
  ASSERT_TRUE((*seat)->record_enforcement("landlock", 1, "auto: landlock is the strongest tier here",
                                         {{"landlock_abi", 7}})
                  .has_value());
  (*seat)->release("exit 3");
  seat->reset();
  auto run = **s->run(id);
  EXPECT_FALSE(run.live());
  EXPECT_EQ(run.outcome, "exit 3");
  EXPECT_EQ(run.executor, "landlock");
  EXPECT_EQ(run.tier, 1);
  // The design's rule: the run store's rows carry the reason the executor was chosen too.
  EXPECT_EQ(run.executor_reason, "auto: landlock is the strongest tier here");
  EXPECT_EQ(run.to_json()["executor_reason"], "auto: landlock is the strongest tier here");
  EXPECT_EQ(run.kernel_facts["landlock_abi"], 7);
}

TEST_P(StoreTest, TheDefaultSlotHasItsDocumentedSeatsAndAnUndeclaredSlotOne) {
  auto s = open();
  ASSERT_TRUE(s);
  auto d = s->slot("m-a", kDefaultSlot);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->seats(), kDefaultSlotMaxSessions);
  auto u = s->slot("m-a", "never-declared");
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->seats(), 1);
  ASSERT_TRUE(s->reserve({"m-a", "never-declared", "d", Holder::self("m-a")}).has_value());
  auto second = s->reserve({"m-a", "never-declared", "d", Holder::self("m-a")});
  ASSERT_FALSE(second.has_value());
  EXPECT_NE(second.error().message.find("carries 1 of 1 runs"), std::string::npos);
  EXPECT_EQ(s->set_slot({"m-a", "bad", 0}).error().code, Code::OptionInvalid);
}

// The design's rule: no spawn onto a dead seat. A run finalised by someone else (another machine
// judged its holder dead) is seen before the command starts.
TEST_P(StoreTest, ASeatFinalisedByAnotherIsNoLongerHeld) {
  auto s = open();
  ASSERT_TRUE(s);
  auto seat = Seat::reserve(*s, {"m-a", kDefaultSlot, "digest", Holder::self("m-a")});
  ASSERT_TRUE(seat.has_value()) << seat.error().to_json().dump();
  EXPECT_TRUE((*seat)->still_held());
  auto other = open();
  ASSERT_TRUE(other);
  ASSERT_TRUE(other->finish((*seat)->run().id, "holder_dead"));
  auto held = (*seat)->still_held();
  ASSERT_FALSE(held);
  EXPECT_EQ(held.error().code, Code::SessionKilled);
  EXPECT_EQ(held.error().facts["outcome"], "holder_dead");
}

TEST_P(StoreTest, ConcurrentOpensOfAFreshStoreMigrateOnce) {
  std::vector<pid_t> pids;
  for (int i = 0; i < 12; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      auto s = Store::open(db_->url());
      if (!s) std::fprintf(stderr, "child: %s\n", s.error().to_json().dump().c_str());
      ::_exit(s ? 0 : 1);
    }
    pids.push_back(pid);
  }
  for (pid_t p : pids) {
    int st = 0;
    ::waitpid(p, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  auto s = open();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->schema_version(), kSchemaVersion);
}

TEST_P(StoreTest, ASchemaNewerThanThisBuildIsRefusedByName) {
  ASSERT_TRUE(open());
  db_->raw(fmt::format("UPDATE airlock_schema SET version = {}", kSchemaVersion + 1));
  auto s = Store::open(db_->url());
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, Code::StoreSchemaNewer);
  EXPECT_NE(s.error().message.find(fmt::format("version {}", kSchemaVersion + 1)), std::string::npos);
}

TEST_P(StoreTest, AMachineRowIsReplacedOnlyIfNobodyReplacedItMeanwhile) {
  auto s = open();
  ASSERT_TRUE(s);
  MachineRecord m;
  m.id = "far";
  m.signature = "sig-1";
  m.signed_at_ms = 100;
  m.attestation = {{"level", "sandboxed"}};
  ASSERT_TRUE(s->put_machine(m));
  // Two writers read the row signed at 100; the first to write wins, the second is told.
  MachineRecord a = m, b = m;
  a.hostname = "install";
  a.signature = "sig-a";
  a.signed_at_ms = 200;
  b.hostname = "probe";
  b.signature = "sig-b";
  b.signed_at_ms = 201;
  auto first = s->replace_machine(a, 100);
  ASSERT_TRUE(first.has_value()) << first.error().message;
  EXPECT_TRUE(*first);
  auto second = s->replace_machine(b, 100);
  ASSERT_TRUE(second.has_value()) << second.error().message;
  EXPECT_FALSE(*second);
  auto rows = s->machines();
  ASSERT_TRUE(rows.has_value() && rows->size() == 1u);
  EXPECT_EQ((*rows)[0].hostname, "install");
  EXPECT_EQ((*rows)[0].signed_at_ms, 200);
  EXPECT_EQ((*rows)[0].attestation, m.attestation) << "the attestation column round-trips";
}

TEST_P(StoreTest, AMachineRowIsRemovedByIdAndOnlyThatRow) {
  auto s = open();
  ASSERT_TRUE(s);
  for (const char* id : {"far", "near"}) {
    MachineRecord m;
    m.id = id;
    m.signed_at_ms = 1;
    ASSERT_TRUE(s->put_machine(m));
  }
  auto gone = s->remove_machine("far");
  ASSERT_TRUE(gone.has_value()) << gone.error().message;
  EXPECT_TRUE(*gone);
  auto again = s->remove_machine("far");
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_FALSE(*again) << "a row that is not there is said to be absent";
  auto rows = s->machines();
  ASSERT_TRUE(rows.has_value() && rows->size() == 1u);
  EXPECT_EQ((*rows)[0].id, "near");
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest, ::testing::Values("sqlite", "postgresql"),
                         [](const auto& info) { return info.param; });

TEST(StoreUrl, UnknownSchemesAreInvalidOptionsAndAbsentServersUnreachable) {
  EXPECT_EQ(Store::open("mysql://x").error().code, Code::OptionInvalid);
  EXPECT_EQ(Store::open("sqlite:").error().code, Code::OptionInvalid);
  EXPECT_EQ(Store::open("relative/path.db").error().code, Code::OptionInvalid);
  auto pg = Store::open("postgresql://u:secret@/nodb?host=/nonexistent-airlock-socket-dir");
  ASSERT_FALSE(pg.has_value());
  EXPECT_EQ(pg.error().code, Code::ServerUnreachable);
  EXPECT_EQ(pg.error().message.find("secret"), std::string::npos) << "the password is shown";
}

TEST(ProcessStartTime, IsStableForALiveProcessAndAbsentForAGoneOne) {
  auto a = process_start_time(::getpid());
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a, process_start_time(::getpid()));
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  EXPECT_FALSE(process_start_time(child).has_value());
}

}  // namespace
}  // namespace airlock::store
