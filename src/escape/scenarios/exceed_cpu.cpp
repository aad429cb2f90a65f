// exceed_cpu: spin kProbeCpuSeconds of CPU time with SIGXCPU ignored, past a real tier's CPU limit.
#include <fmt/format.h>
#include <signal.h>
#include <time.h>

#include <cstdint>
#include <cstdlib>

#include "escape/scenario.h"

namespace airlock::escape::scenarios::exceed_cpu {

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput& in) {
  int seconds = std::atoi(in.arg(0).c_str());
  // Only the hard RLIMIT_CPU's SIGKILL can stop it, not the soft limit's SIGXCPU.
  ::signal(SIGXCPU, SIG_IGN);
  volatile uint64_t spin = 0;
  while (monotonic_seconds(CLOCK_PROCESS_CPUTIME_ID) < seconds)
    for (int i = 0; i < 1000000; ++i) spin = spin + 1;
  return {{},
          true,
          fmt::format("spun {:.1f} s of CPU time with SIGXCPU ignored and nothing stopped it",
                      monotonic_seconds(CLOCK_PROCESS_CPUTIME_ID)),
          0,
          Json::object()};
}

#else

class ExceedCpu final : public Scenario {
  Result<std::vector<std::string> > bait(Run&) override {
    return std::vector{std::to_string(kProbeCpuSeconds)};
  }
  // Using the resource is the breach: the probe's own report counts, and so does its CPU time.
  Judged judge(Run&, const Observed& o) override {
    double cpu = o.outcome ? (o.outcome->user_us + o.outcome->system_us) / 1e6 : 0;
    bool spun = cpu >= kProbeCpuSeconds * 0.95;
    Judged j;
    j.host = {{"cpu_seconds", cpu}};
    j.breached = (o.probe && o.probe->breached) || spun;
    j.evidence = fmt::format("{}; host: {}", o.probe_said(),
                             o.outcome ? describe(*o.outcome) : std::string("no outcome"));
    return j;
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<ExceedCpu>(); }

#endif

}  // namespace airlock::escape::scenarios::exceed_cpu
