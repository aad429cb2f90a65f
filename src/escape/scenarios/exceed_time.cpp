// exceed_time: sleep kProbeSleepSeconds with SIGTERM ignored, past a real tier's wall-time limit
// and its SIGTERM-to-SIGKILL grace.
#include <fmt/format.h>
#include <signal.h>
#include <time.h>

#include <cstdlib>

#include "escape/scenario.h"

namespace airlock::escape::scenarios::exceed_time {

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput& in) {
  int seconds = std::atoi(in.arg(0).c_str());
  // Only the SIGKILL after the grace period can stop it, not a polite SIGTERM.
  ::signal(SIGTERM, SIG_IGN);
  double start = monotonic_seconds(CLOCK_MONOTONIC);
  for (double left = seconds; left > 0; left = seconds - (monotonic_seconds(CLOCK_MONOTONIC) - start)) {
    timespec ts{static_cast<time_t>(left),
                static_cast<long>((left - static_cast<double>(static_cast<time_t>(left))) * 1e9)};
    ::nanosleep(&ts, nullptr);
  }
  return {{},
          true,
          fmt::format("slept {} s with SIGTERM ignored and nothing stopped it", seconds),
          0,
          Json::object()};
}

#else

class ExceedTime final : public Scenario {
  Result<std::vector<std::string> > bait(Run&) override {
    return std::vector{std::to_string(kProbeSleepSeconds)};
  }
  // Using the resource is the breach: the probe's own report counts, and so does a run that lasted
  // the whole sleep without a timeout, or overran the plan's limit.
  Judged judge(Run&, const Observed& o) override {
    double wall = o.outcome ? o.outcome->wall_ms : 0;
    bool ran_out = o.outcome && !o.outcome->timed_out && wall >= kProbeSleepSeconds * 950.0;
    bool overran = o.outcome && wall > static_cast<double>(o.wall_limit_ms) + 1000.0;
    Judged j;
    j.host = {
        {"wall_ms", wall}, {"timed_out", o.outcome && o.outcome->timed_out}, {"overran_limit", overran}};
    j.breached = (o.probe && o.probe->breached) || ran_out || overran;
    j.evidence = fmt::format("{}; host: {}", o.probe_said(),
                             o.outcome ? describe(*o.outcome) : std::string("no outcome"));
    return j;
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<ExceedTime>(); }

#endif

}  // namespace airlock::escape::scenarios::exceed_time
