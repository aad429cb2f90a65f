// see_or_signal_host_process: see a host process (the suite's sleeper) by pid, read its command
// line, and send it a signal.
#include <fmt/format.h>
#include <signal.h>

#include <cstdlib>

#include "escape/scenario.h"

namespace airlock::escape::scenarios::see_or_signal_host_process {

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput& in) {
  pid_t pid = static_cast<pid_t>(std::atoi(in.arg(0).c_str()));
  int e0 = ::kill(pid, 0) < 0 ? errno : 0;
  int e1 = ::kill(pid, SIGUSR1) < 0 ? errno : 0;
  auto c = read_some(fmt::format("/proc/{}/cmdline", pid));
  return {{},
          e0 == 0 || e1 == 0 || c.err == 0,
          fmt::format("kill({}, 0): {}; kill({}, SIGUSR1): {}; /proc/{}/cmdline: {}", pid,
                      e0 ? err_name(e0) : std::string("ok"), pid, e1 ? err_name(e1) : std::string("SENT"),
                      pid, c.err ? err_name(c.err) : fmt::format("\"{}\"", printable(c.data))),
          e0   ? e0
          : e1 ? e1
               : c.err,
          Json::object()};
}

#else

class SeeOrSignalHostProcess final : public Scenario {
  Result<std::vector<std::string> > bait(Run& run) override {
    return std::vector{std::to_string(run.bait.sleeper_pid)};
  }
  // The sleeper blocks SIGUSR1, so a signal sent to it stays pending where the host sees it; its
  // command line holds a token a probe can only show by reading it.
  Judged judge(Run& run, const Observed& o) override {
    bool pending = run.canaries.sleeper_has_pending(SIGUSR1), seen = has(o.output, run.bait.sleeper_token);
    Judged j;
    j.host = {{"sigusr1_pending_at_sleeper", pending}, {"sleeper_token_in_output", seen}};
    j.breached = pending || seen;
    j.evidence = fmt::format("{}; host: SIGUSR1 {} at the sleeper (pid {}), its cmdline token {} the output",
                             o.probe_said(), pending ? "PENDING" : "not pending", run.bait.sleeper_pid,
                             seen ? "IS IN" : "is not in");
    return j;
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<SeeOrSignalHostProcess>(); }

#endif

}  // namespace airlock::escape::scenarios::see_or_signal_host_process
