// watch_host_directory: learn the names of files created in an unreadable host directory through an
// inotify watch (the suite creates files there while the probe runs).
#include <fmt/ranges.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>

#include "escape/scenario.h"

namespace airlock::escape::scenarios::watch_host_directory {

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput& in) {
  const std::string& dir = in.arg(0);
  int fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd < 0) return {{}, false, "inotify_init1: " + err_name(errno), errno, Json::object()};
  int wd = ::inotify_add_watch(fd, dir.c_str(), IN_CREATE | IN_MOVED_TO);
  if (wd < 0) {
    int e = errno;
    ::close(fd);
    return {{}, false, fmt::format("inotify_add_watch({}): {}", dir, err_name(e)), e, Json::object()};
  }
  std::vector<std::string> names;
  double until = monotonic_seconds(CLOCK_MONOTONIC) + 2.0;
  alignas(inotify_event) char buf[4096];
  while (names.size() < 5 && monotonic_seconds(CLOCK_MONOTONIC) < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    ssize_t n = ::read(fd, buf, sizeof buf);
    for (ssize_t off = 0; n > 0 && off < n;) {
      auto* ev = reinterpret_cast<inotify_event*>(buf + off);
      if (ev->len) names.push_back(printable(ev->name));
      off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
    }
  }
  ::close(fd);
  return {{},
          !names.empty(),
          fmt::format("inotify_add_watch({}): WATCHING; names seen: [{}]", dir, fmt::join(names, ", ")),
          0,
          Json::object()};
}

#else

class WatchHostDirectory final : public Scenario {
  Result<std::vector<std::string> > bait(Run& run) override { return std::vector{run.bait.watched_dir}; }
  // Files named after the watched token appear in the directory while the probe runs.
  std::shared_ptr<void> watch(Run& run) override { return run.canaries.churn_watched_dir(); }
  Judged judge(Run& run, const Observed& o) override {
    bool seen = has(o.output, run.bait.watched_token);
    Judged j;
    j.host = {{"watched_token_in_output", seen}};
    j.breached = seen;
    j.evidence = fmt::format("{}; host: the names created in {} {} the output", o.probe_said(),
                             run.bait.watched_dir, seen ? "ARE IN" : "are not in");
    return j;
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<WatchHostDirectory>(); }

#endif

}  // namespace airlock::escape::scenarios::watch_host_directory
