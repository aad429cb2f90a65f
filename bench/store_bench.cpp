// store_bench: seat reservations per second and their p99 latency under contention, per backend.
// Each thread holds its own connection and loops: reserve a seat in a slot of 3, release it if
// won. With more threads than seats, reservations collide on the seats' index and on the
// backend's write lock. SQLite: a file in a temp dir. PostgreSQL: $AIRLOCK_BENCH_PG_URL (see
// bench/store_bench.sh, which starts a throwaway cluster); skipped when unset.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include "store/store.h"

namespace {

using airlock::store::Holder;
using airlock::store::Store;

std::mutex g_mu;
std::vector<double> g_latency_us;  // every reservation's latency, all threads
int64_t g_admitted = 0, g_refused = 0;
std::chrono::steady_clock::time_point g_first, g_last;

// The SQLite file's directory, removed at exit.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/airlock-store-bench.XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::string sqlite_url() {
  static TempDir dir;
  return "sqlite:" + dir.path + "/airlock.db";
}

std::string pg_url() {
  const char* u = std::getenv("AIRLOCK_BENCH_PG_URL");
  return u ? u : "";
}

void reserve_release(benchmark::State& state, const std::string& url) {
  if (url.empty()) {
    state.SkipWithError("AIRLOCK_BENCH_PG_URL is not set (bench/store_bench.sh sets it)");
    return;
  }
  auto store = Store::open(url);
  if (!store) {
    state.SkipWithError(store.error().message.c_str());
    return;
  }
  const std::string slot = "bench";
  if (state.thread_index() == 0) {
    (void)(*store)->set_slot({"bench-machine", slot, 3});
    std::lock_guard lock(g_mu);
    g_latency_us.clear();
    g_admitted = g_refused = 0;
    g_first = {};
  }
  Holder self = Holder::self("bench-machine");
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    auto run = (*store)->reserve({"bench-machine", slot, "digest", self});
    auto t1 = std::chrono::steady_clock::now();
    if (run) (void)(*store)->finish(run->id, "exit 0");
    std::lock_guard lock(g_mu);
    if (g_first == std::chrono::steady_clock::time_point{}) g_first = t0;
    g_last = t1;
    g_latency_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    ++(run ? g_admitted : g_refused);
  }
  // The loop's end is a barrier across threads: every latency is in by now.
  if (state.thread_index() == 0) {
    std::lock_guard lock(g_mu);
    auto v = g_latency_us;
    std::sort(v.begin(), v.end());
    auto at = [&](double q) {
      return v.empty() ? 0.0 : v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
    };
    double wall_s = std::chrono::duration<double>(g_last - g_first).count();
    state.counters["reservations_per_s"] = wall_s > 0 ? static_cast<double>(v.size()) / wall_s : 0;
    state.counters["p50_us"] = at(0.50);
    state.counters["p99_us"] = at(0.99);
    state.counters["admitted"] = static_cast<double>(g_admitted);
    state.counters["refused"] = static_cast<double>(g_refused);
  }
}

void BM_sqlite(benchmark::State& state) { reserve_release(state, sqlite_url()); }
void BM_postgresql(benchmark::State& state) { reserve_release(state, pg_url()); }

BENCHMARK(BM_sqlite)->Threads(1)->Threads(8)->Threads(32)->UseRealTime()->MinTime(2.0);
BENCHMARK(BM_postgresql)->Threads(1)->Threads(8)->Threads(32)->UseRealTime()->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
