// broker_bench: read_file on a small file through a Session, in process, receipt included,
// side by side with the same read through plain open/fstat/read/close. Reports decisions per
// second and per-call p50/p99 (counters), measured over every call of the run.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "base/fs.h"
#include "broker/session.h"
#include "exec/planner.h"

namespace {

using namespace airlock;

struct Fixture {
  std::string root;
  std::unique_ptr<broker::Session> session;
  Fixture() {
    std::string t = "/tmp/airlock-broker-bench-XXXXXX";
    root = ::mkdtemp(t.data());
    (void)make_dirs(root + "/ws/src");
    (void)make_dirs(root + "/state");
    (void)write_file_atomic(root + "/ws/src/small.txt", std::string(200, 'x'));
    // Limits out of the way: the benchmark measures the decision, not the refusal of a flood.
    auto pol = policy::parse_layer_text(
        fmt::format(R"({{"schema_version": "airlock.task_policy.v1", "executor": "host", "workspace": "{}/ws",
          "readable": ["src"], "write_back_paths": ["src"],
          "limits": {{"max_actions_per_minute": 2000000000, "session_budget_seconds": 2000000000}}}})",
                    root),
        policy::builtin_default(), "bench");
    broker::SessionOptions so(root + "/state", plan::Profile::Development);
    auto s = broker::Session::open(*pol, exec::facts_for(*pol, exec::HostProbe(root + "/state")), so);
    if (!s) std::abort();
    session = std::move(*s);
  }
  ~Fixture() {
    session.reset();
    (void)remove_tree(root);
  }
};

void report(benchmark::State& state, std::vector<double>& ns) {
  std::sort(ns.begin(), ns.end());
  if (ns.empty()) return;
  state.counters["p50_us"] = ns[ns.size() / 2] / 1000;
  state.counters["p99_us"] = ns[ns.size() * 99 / 100] / 1000;
  state.counters["p999_us"] = ns[ns.size() * 999 / 1000] / 1000;
  state.counters["max_us"] = ns.back() / 1000;
  double total_s = 0;
  for (double v : ns) total_s += v / 1e9;
  state.counters["per_s"] = static_cast<double>(ns.size()) / total_s;  // calls per second of wall time
}

template <class F>
void timed(benchmark::State& state, F&& f) {
  std::vector<double> ns;
  ns.reserve(static_cast<size_t>(state.max_iterations));
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    ns.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count());
  }
  report(state, ns);
}

void BM_SessionReadFile(benchmark::State& state) {
  Fixture fx;
  timed(state, [&] {
    auto r = fx.session->read_file("src/small.txt");
    if (!r) std::abort();
    benchmark::DoNotOptimize(r->data.data());
  });
}

void BM_SessionReadFileRefused(benchmark::State& state) {
  Fixture fx;
  timed(state, [&] {
    auto r = fx.session->read_file("../ws/src/small.txt");
    if (r) std::abort();
  });
}

// The baseline: what a program with raw file access does, with no check and no record.
void BM_PlainRead(benchmark::State& state) {
  Fixture fx;
  std::string path = fx.session->dirs().view + "/src/small.txt";
  timed(state, [&] {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st{};
    ::fstat(fd, &st);
    std::string data(static_cast<size_t>(st.st_size), '\0');
    benchmark::DoNotOptimize(::read(fd, data.data(), data.size()));
    ::close(fd);
  });
}

// Interleaved in one run; a fixed number of calls keeps the receipts file bounded (~60 MB).
BENCHMARK(BM_PlainRead)->Iterations(100000)->Repetitions(3)->ReportAggregatesOnly(false);
BENCHMARK(BM_SessionReadFile)->Iterations(100000)->Repetitions(3)->ReportAggregatesOnly(false);
BENCHMARK(BM_SessionReadFileRefused)->Iterations(100000)->Repetitions(3)->ReportAggregatesOnly(false);

}  // namespace

BENCHMARK_MAIN();
