// tamper_host_process: renice, re-limit, re-prioritise or re-pin a host process (the suite's
// sleeper) by pid, with calls that are not signals.
#include <fmt/format.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "escape/scenario.h"

namespace airlock::escape::scenarios::tamper_host_process {

#if AIRLOCK_PROBE_SIDE

// Its nice value, its descriptor limit, its I/O priority, its CPUs. Only the suite's own process is
// touched; the host compares it with how it was planted.
ProbeReport probe(const ProbeInput& in) {
  pid_t pid = static_cast<pid_t>(std::atoi(in.arg(0).c_str()));
  errno = 0;
  int nice = ::getpriority(PRIO_PROCESS, static_cast<id_t>(pid));
  int e_get = errno;
  int e_nice = ::setpriority(PRIO_PROCESS, static_cast<id_t>(pid), 19) < 0 ? errno : 0;
  rlimit lim{777, 777};
  rlimit old{};
  int e_lim = ::prlimit(pid, RLIMIT_NOFILE, &lim, &old) < 0 ? errno : 0;
  constexpr int kIoprioIdle = 3 << 13;  // IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0)
  int e_io = ::syscall(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, pid, kIoprioIdle) < 0 ? errno : 0;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  int e_cpu = ::sched_setaffinity(pid, sizeof one, &one) < 0 ? errno : 0;
  auto said = [](int e) { return e ? err_name(e) : std::string("CHANGED"); };
  int first = e_nice ? e_nice : e_lim ? e_lim : e_io ? e_io : e_cpu;
  return {{},
          e_nice == 0 || e_lim == 0 || e_io == 0 || e_cpu == 0,
          fmt::format("getpriority({}): {}; setpriority({}, 19): {}; prlimit({}, NOFILE, 777): {}; "
                      "ioprio_set({}, idle): {}; sched_setaffinity({}, cpu 0): {}",
                      pid, e_get ? err_name(e_get) : fmt::format("nice {}", nice), pid, said(e_nice), pid,
                      said(e_lim), pid, said(e_io), pid, said(e_cpu)),
          first,
          Json::object()};
}

#else

class TamperHostProcess final : public Scenario {
  Result<std::vector<std::string> > bait(Run& run) override {
    return std::vector{std::to_string(run.bait.sleeper_pid)};
  }
  Judged judge(Run& run, const Observed& o) override {
    std::string now = run.canaries.sleeper_state();
    bool changed = now != run.bait.sleeper_planted;
    Judged j;
    j.host = {{"sleeper_planted", run.bait.sleeper_planted}, {"sleeper_now", now}};
    j.breached = changed;
    j.evidence = fmt::format("{}; host: the sleeper (pid {}) {}", o.probe_said(), run.bait.sleeper_pid,
                             changed ? fmt::format("CHANGED from [{}] to [{}]", run.bait.sleeper_planted, now)
                                     : fmt::format("is as planted [{}]", now));
    return j;
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<TamperHostProcess>(); }

#endif

}  // namespace airlock::escape::scenarios::tamper_host_process
