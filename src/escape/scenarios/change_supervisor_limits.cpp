// change_supervisor_limits: change the rlimits of the supervisor that keeps the wall clock (a
// supervisor without descriptors cannot wait for the deadline).
#include <fmt/ranges.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>

#include "escape/scenario.h"

namespace airlock::escape::scenarios::change_supervisor_limits {

#if AIRLOCK_PROBE_SIDE

// Lowers the parent's descriptor limit by one, by pid. Inside a namespace or a guest the parent is
// someone else, and nothing changes there.
ProbeReport probe(const ProbeInput&) {
  pid_t parent = ::getppid();
  rlimit old{};
  int e_get = ::prlimit(parent, RLIMIT_NOFILE, nullptr, &old) < 0 ? errno : 0;
  rlimit lower =
      e_get ? rlimit{512, 512} : rlimit{old.rlim_cur > 64 ? old.rlim_cur - 1 : old.rlim_cur, old.rlim_max};
  int e_set = ::prlimit(parent, RLIMIT_NOFILE, &lower, nullptr) < 0 ? errno : 0;
  return {{},
          e_set == 0,
          fmt::format("prlimit({} (the parent), NOFILE): read {}; set soft {}: {}", parent,
                      e_get ? err_name(e_get) : fmt::format("soft {} hard {}", old.rlim_cur, old.rlim_max),
                      lower.rlim_cur, e_set ? err_name(e_set) : std::string("CHANGED")),
          e_set,
          Json::object()};
}

#else

class ChangeSupervisorLimits final : public Scenario {
  Result<std::vector<std::string> > bait(Run&) override { return std::vector<std::string>{}; }
  // The supervisor reports whether its own limits moved while the command ran.
  Judged judge(Run&, const Observed& o) override {
    std::vector<std::string> changed;
    if (o.outcome) changed = o.outcome->supervisor_limits_changed;
    Judged j;
    j.host = {{"supervisor_limits_changed", changed}};
    j.breached = !changed.empty();
    j.evidence =
        fmt::format("{}; host: {}", o.probe_said(),
                    !o.outcome        ? std::string("no outcome")
                    : changed.empty() ? std::string("the supervisor's limits are as it set them")
                                      : fmt::format("the supervisor's {} CHANGED", fmt::join(changed, ", ")));
    return j;
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<ChangeSupervisorLimits>(); }

#endif

}  // namespace airlock::escape::scenarios::change_supervisor_limits
