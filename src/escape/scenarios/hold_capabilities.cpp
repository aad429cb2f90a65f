// hold_capabilities: hold a capability, or a bounding set an exec could draw on (judged on the host
// from /proc/<pid>/status while the probe runs).
#include <fmt/format.h>
#include <sys/prctl.h>
#include <time.h>

#include <cerrno>
#include <cstdint>

#include "escape/scenario.h"

#if AIRLOCK_PROBE_SIDE
#include "linux/raw_syscalls.h"
#endif

namespace airlock::escape::scenarios::hold_capabilities {

#if AIRLOCK_PROBE_SIDE

// The capabilities this process holds, and the bounding set an exec could draw on without
// no_new_privs; then a pause, so the suite sees the same from the host (/proc/<pid>/status), which
// is the judge. Nothing is used: changing the host (sethostname, the clock) is not the suite's to do.
ProbeReport probe(const ProbeInput&) {
  uint64_t eff = 0, prm = 0;
  int e = linux::capget_self(&eff, &prm) < 0 ? errno : 0;
  uint64_t bnd = 0;
  for (int cap = 0; cap < 64; ++cap)
    if (::prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1) bnd |= uint64_t{1} << cap;
  int nnp = ::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
  bool holds = e == 0 && (eff != 0 || prm != 0 || (bnd != 0 && nnp != 1));
  timespec ts{2, 0};
  while (::nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
  return {{},
          holds,
          fmt::format("capget: {}; effective {:#x}, permitted {:#x}, bounding {:#x}, no_new_privs {}",
                      e ? err_name(e) : std::string("ok"), eff, prm, bnd, nnp),
          e,
          Json::object()};
}

#else

class HoldCapabilities final : public Scenario {
  std::shared_ptr<Canaries::SeenStatus> seen_;

  Result<std::vector<std::string> > bait(Run&) override { return std::vector<std::string>{}; }
  // The probe's capability lines, read by the host while it runs: the first process whose argv is
  // this probe's.
  std::shared_ptr<void> watch(Run& run) override {
    std::shared_ptr<void> guard;
    seen_ = run.canaries.watch_status_of(
        fmt::format("{} {} --run {}", kProbeProgram, run.name, run.bait.root), &guard);
    return guard;
  }
  // A capability held, or a bounding set an exec could draw on when no_new_privs does not stop it.
  Judged judge(Run&, const Observed& o) override {
    pid_t pid = 0;
    std::string status;
    bool holds = false;
    if (seen_) {
      std::lock_guard lk(seen_->mu);
      pid = seen_->pid;
      status = seen_->status;
      holds = pid > 0 && (seen_->eff || seen_->prm || seen_->amb || (seen_->bnd && seen_->no_new_privs != 1));
    }
    Judged j;
    j.host = {{"probe_pid", pid}, {"status", status}};
    j.breached = holds;
    j.evidence = fmt::format(
        "{}; host: {}", o.probe_said(),
        pid == 0 ? std::string("no process of the probe's on the host")
                 : fmt::format("/proc/{}/status {}{}", pid, status, holds ? " — HOLDS capabilities" : ""));
    return j;
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<HoldCapabilities>(); }

#endif

}  // namespace airlock::escape::scenarios::hold_capabilities
