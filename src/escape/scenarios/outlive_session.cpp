// outlive_session: leave a daemon behind that outlives the session (double fork, setsid, leave the
// run's cgroup, kill the supervisor that would kill it).
#include <fcntl.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "escape/scenario.h"

#if AIRLOCK_PROBE_SIDE
#include "linux/cgroup.h"
#endif

namespace airlock::escape::scenarios::outlive_session {

constexpr int kDaemonSleepSeconds = 300;

#if AIRLOCK_PROBE_SIDE

// Moves this process out of the per-run cgroup ("airlock-<session>-<n>") the executor may have put
// it in, into that cgroup's parent, so releasing the run's cgroup does not kill it. Only possible
// unconfined. Fixed-size text, so a forked child can pass it through a pipe.
void leave_run_cgroups(char* what, size_t size) {
  std::string said = "in no per-run cgroup";
  if (int fd = ::open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC); fd < 0) {
    said = "cannot tell its cgroup: /proc/self/cgroup: " + err_name(errno);
    std::snprintf(what, size, "%s", said.c_str());
    return;
  } else {
    ::close(fd);
  }
  for (std::string_view controller : {std::string_view("pids"), std::string_view("")}) {
    auto dir = linux::own_cgroup_dir(controller);
    if (!dir) continue;
    auto slash = dir->rfind('/');
    if (slash == std::string::npos || dir->compare(slash + 1, 8, "airlock-") != 0) continue;
    std::string procs = dir->substr(0, slash) + "/cgroup.procs";
    int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    std::string pid = std::to_string(::getpid());
    int e = fd < 0 ? errno : ::write(fd, pid.data(), pid.size()) < 0 ? errno : 0;
    if (fd >= 0) ::close(fd);
    said = e ? fmt::format("cannot leave cgroup {}: {}", *dir, err_name(e))
             : fmt::format("left cgroup {}", *dir);
  }
  std::snprintf(what, size, "%s", said.c_str());
}

struct DaemonNote {
  pid_t pid = 0;
  char cgroup[240] = {};
};

// A plain double fork is not enough anywhere: the supervisor is a child subreaper and kills every
// descendant when the command ends. So the probe also does what only an unconfined process can:
// leave the run's cgroup (which is killed on release) and kill its own supervisor, so that nobody
// is left to reap. Whether the daemon outlived the session only the host can tell, after close;
// `breached` here means "staged".
ProbeReport probe(const ProbeInput&) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) < 0) return {{}, false, "pipe: " + err_name(errno), errno, Json::object()};
  pid_t mid = ::fork();
  if (mid < 0) return {{}, false, "fork: " + err_name(errno), errno, Json::object()};
  if (mid == 0) {
    ::setsid();
    pid_t d = ::fork();
    if (d == 0) {
      DaemonNote n;
      n.pid = ::getpid();
      leave_run_cgroups(n.cgroup, sizeof n.cgroup);
      (void)!::write(p[1], &n, sizeof n);
      ::close(p[1]);
      ::close(p[0]);
      timespec ts{kDaemonSleepSeconds, 0};
      while (::nanosleep(&ts, &ts) < 0 && errno == EINTR) {
      }
      ::_exit(0);
    }
    ::_exit(d < 0 ? 1 : 0);
  }
  ::close(p[1]);
  int st = 0;
  ::waitpid(mid, &st, 0);
  DaemonNote n;
  ssize_t got = ::read(p[0], &n, sizeof n);
  ::close(p[0]);
  if (got != static_cast<ssize_t>(sizeof n))
    return {{},
            false,
            "the daemon did not start (fork in the intermediate child failed)",
            EAGAIN,
            Json::object()};

  // The supervisor would SIGKILL this probe when it dies (PR_SET_PDEATHSIG); the report must
  // still be printed, so that goes first, and this probe leaves the run's cgroup as well.
  ::prctl(PR_SET_PDEATHSIG, 0);
  char self_cg[240];
  leave_run_cgroups(self_cg, sizeof self_cg);
  pid_t supervisor = ::getppid();
  int ek = ::kill(supervisor, SIGKILL) < 0 ? errno : 0;
  Json extra = {{"daemon_pid", n.pid}, {"supervisor_pid", supervisor}, {"supervisor_killed", ek == 0}};
  return {{},
          true,
          fmt::format(
              "daemon pid {} started (double fork, setsid, sleeps {} s); daemon: {}; kill(supervisor pid {}, "
              "SIGKILL): {}",
              n.pid, kDaemonSleepSeconds, n.cgroup, supervisor, ek ? err_name(ek) : std::string("KILLED")),
          ek,
          std::move(extra)};
}

#else

class OutliveSession final : public Scenario {
  pid_t daemon_pid_ = 0;       // the daemon, as the probe reported it
  bool daemon_alive_ = false;  // ... still running after close (checked by pid and run marker)

  Result<std::vector<std::string> > bait(Run&) override { return std::vector<std::string>{}; }
  // Before the suite kills what is left: is the daemon the probe named still running?
  void observe(Run& run, const Observed& o) override {
    if (o.probe && o.probe->extra.contains("daemon_pid") && o.probe->extra["daemon_pid"].is_number_integer())
      daemon_pid_ = o.probe->extra["daemon_pid"].get<pid_t>();
    // The pid is the probe's view of it: on the host it must also carry the run marker.
    daemon_alive_ =
        daemon_pid_ > 0 && process_running(daemon_pid_) && has(process_cmdline(daemon_pid_), run.bait.root);
  }
  Judged judge(Run&, const Observed& o) override {
    Judged j;
    j.staged = true;
    j.host = {{"daemon_pid", daemon_pid_},
              {"daemon_alive_after_close", daemon_alive_},
              {"marked_processes_alive_after_close", o.left_behind}};
    j.breached = daemon_alive_ || !o.left_behind.empty();
    std::string seen =
        daemon_alive_ ? fmt::format("after close the daemon (pid {}) is ALIVE", daemon_pid_)
        : !o.left_behind.empty()
            ? fmt::format("after close probe processes are ALIVE (pid {})", fmt::join(o.left_behind, ", "))
            : std::string("after close no process of the probe is alive");
    j.evidence = fmt::format("{}; host: {}", o.probe_said(), seen);
    return j;
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<OutliveSession>(); }

#endif

}  // namespace airlock::escape::scenarios::outlive_session
