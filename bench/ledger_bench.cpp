// Effect ledger benchmarks (Google Benchmark): intent+outcome appends per second with and
// without fsync, and the time to scan a ledger of a million rows (two million lines).
#include <benchmark/benchmark.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "base/fs.h"
#include "base/hash.h"
#include "ledger/effect_ledger.h"

namespace {

using namespace airlock;

// A directory of its own under $TMPDIR (or /tmp), removed at exit. Never destroyed itself: the
// exit handler, registered during its construction, runs after static destructors would.
const std::string& bench_dir() {
  static const std::string& dir = *new std::string([] {
    const char* t = ::getenv("TMPDIR");
    std::string templ = std::string(t && *t ? t : "/tmp") + "/airlock-ledger-bench-XXXXXX";
    if (!::mkdtemp(templ.data())) std::abort();
    std::atexit([] { (void)remove_tree(bench_dir()); });
    return templ;
  }());
  return dir;
}

EffectIntent intent(uint64_t n) {
  return {fmt::format("{:032x}", n),
          "ik2-" + sha256_hex(std::to_string(n)),
          "pay",
          sha256_hex("{\"amount\":5}"),
          "run-0123456789abcdef",
          fmt::format("step-{}.0", n),
          fmt::format("/var/lib/airlock/sessions/0123456789abcdef0123456789abcdef/tmp/call-{:032x}", n),
          1700000000000 + static_cast<int64_t>(n)};
}

EffectOutcome outcome(const EffectIntent& i) { return {i.attempt_id, i.key, true, std::nullopt, i.started_at + 40, 40.5}; }

// One iteration: an intent appended (durable as the mode says), then its outcome.
void BM_AppendIntentOutcome(benchmark::State& state) {
  bool fsync = state.range(0) != 0;
  std::string path = bench_dir() + (fsync ? "/append-fsync.jsonl" : "/append.jsonl");
  ::unlink(path.c_str());
  auto led = ledger::EffectLedger::open(path, {.intents = true, .fsync = fsync});
  if (!led) return state.SkipWithError(led.error().message.c_str());
  uint64_t n = 0;
  for (auto _ : state) {
    EffectIntent i = intent(n++);
    if (!led->append_intent(i) || !led->append_outcome(outcome(i))) return state.SkipWithError("append failed");
  }
  state.SetItemsProcessed(static_cast<int64_t>(n));
  state.SetLabel(fsync ? "fdatasync per intent" : "no fsync");
  ::unlink(path.c_str());
}
BENCHMARK(BM_AppendIntentOutcome)->Arg(0)->Arg(1)->ArgName("fsync")->Unit(benchmark::kMicrosecond)->UseRealTime();

// A scan of 1,000,000 completed rows: the file is written once, outside the timing.
void BM_Scan1MRows(benchmark::State& state) {
  constexpr uint64_t kRows = 1'000'000;
  std::string path = bench_dir() + "/scan.jsonl";
  if (::access(path.c_str(), F_OK) != 0) {
    std::string bytes;
    bytes.reserve(kRows * 700);
    for (uint64_t n = 0; n < kRows; ++n) {
      EffectIntent i = intent(n);
      bytes += canonical_json(ledger::intent_record(i)) + "\n";
      bytes += canonical_json(ledger::outcome_record(outcome(i))) + "\n";
    }
    if (!write_file_atomic(path, bytes)) return state.SkipWithError("cannot write the ledger");
  }
  uint64_t bytes = 0;
  for (auto _ : state) {
    auto s = ledger::scan_ledger(path);
    if (!s || s->rows.size() != kRows) return state.SkipWithError("scan failed");
    bytes = s->bytes;
    benchmark::DoNotOptimize(s->rows.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kRows));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.SetLabel(fmt::format("{} rows, {} lines, {:.0f} MB", kRows, 2 * kRows, bytes / 1e6));
}
BENCHMARK(BM_Scan1MRows)->Unit(benchmark::kMillisecond)->Iterations(3)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
