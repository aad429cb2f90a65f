// shed_seccomp: enter a new user namespace, in which the process holds every capability and a
// filter's rules may not reach: unshare(CLONE_NEWUSER) in a child, and clone3 with CLONE_NEWUSER
// (whose flags a seccomp filter cannot read).
#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "escape/scenario.h"

#if AIRLOCK_PROBE_SIDE
#include "linux/raw_syscalls.h"
#endif

namespace airlock::escape::scenarios::shed_seccomp {

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput&) {
  auto in_child = [](auto&& attempt) -> int {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) < 0) return errno;
    pid_t c = ::fork();
    if (c < 0) {
      int e = errno;
      ::close(p[0]);
      ::close(p[1]);
      return e;
    }
    if (c == 0) {
      int e = attempt();
      (void)!::write(p[1], &e, sizeof e);
      ::_exit(0);
    }
    ::close(p[1]);
    int e = EIO;
    if (::read(p[0], &e, sizeof e) != static_cast<ssize_t>(sizeof e)) e = EIO;
    ::close(p[0]);
    ::waitpid(c, nullptr, 0);
    return e;
  };
  int e1 = in_child([] { return ::unshare(CLONE_NEWUSER) < 0 ? errno : 0; });
  long c = linux::clone3_new_user_namespace();
  if (c == 0) ::_exit(0);
  int e2 = c < 0 ? errno : 0;
  if (c > 0) ::waitpid(static_cast<pid_t>(c), nullptr, 0);
  auto said = [](int e) { return e ? err_name(e) : std::string("NEW USER NAMESPACE"); };
  return {{},
          e1 == 0 || e2 == 0,
          fmt::format("unshare(CLONE_NEWUSER): {}; clone3(CLONE_NEWUSER): {}", said(e1), said(e2)),
          e1 ? e1 : e2,
          Json::object()};
}

#else

class ShedSeccomp final : public Scenario {
  Result<std::vector<std::string> > bait(Run&) override { return std::vector<std::string>{}; }
  Judged judge(Run&, const Observed& o) override { return judged_by_probe(o); }
};

std::unique_ptr<Scenario> make() { return std::make_unique<ShedSeccomp>(); }

#endif

}  // namespace airlock::escape::scenarios::shed_seccomp
