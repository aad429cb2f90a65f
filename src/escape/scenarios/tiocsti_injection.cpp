// tiocsti_injection: inject input into the terminal the command was given (its stdin: a pty the
// suite holds), as a command handed the user's terminal would type into the shell after it.
#include <fcntl.h>
#include <fmt/format.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "base/hash.h"
#include "escape/scenario.h"

namespace airlock::escape::scenarios::tiocsti_injection {

#if AIRLOCK_PROBE_SIDE

// Injects the token and a newline with TIOCSTI. First as it stands (a process with CAP_SYS_ADMIN
// may inject into any terminal); then, if refused, the way an unprivileged process can: a child
// makes a new session and takes the terminal as its controlling terminal (TIOCSCTTY: it is
// nobody's), and injects there. Whether anything arrived only the host can tell, from the pty's
// master; `breached` here means "the ioctl succeeded".
ProbeReport probe(const ProbeInput& in) {
  const std::string& token = in.arg(0);
  std::string text = token + "\n";
  auto inject = [&]() -> int {
    for (char c : text)
      if (::ioctl(0, TIOCSTI, &c) < 0) return errno;
    return 0;
  };
  int tty = ::isatty(0) ? 0 : errno;
  int e1 = inject();
  int e2 = -1, e_setsid = 0, e_ctty = 0;
  if (e1 != 0) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) == 0) {
      pid_t c = ::fork();
      if (c == 0) {
        int res[3] = {0, 0, 0};
        if (::setsid() < 0)
          res[0] = errno;
        else if (::ioctl(0, TIOCSCTTY, 0) < 0)
          res[1] = errno;
        else
          res[2] = inject();
        if (res[0] || res[1]) res[2] = -1;
        (void)!::write(p[1], res, sizeof res);
        ::_exit(0);
      }
      ::close(p[1]);
      int res[3] = {0, 0, -1};
      if (c > 0) {
        if (::read(p[0], res, sizeof res) == static_cast<ssize_t>(sizeof res)) {
          e_setsid = res[0];
          e_ctty = res[1];
          e2 = res[2];
        }
        ::waitpid(c, nullptr, 0);
      } else {
        e_setsid = errno;
      }
      ::close(p[0]);
    }
  }
  auto said = [](int e) {
    return e == 0 ? std::string("INJECTED") : e < 0 ? std::string("not reached") : err_name(e);
  };
  return {{},
          e1 == 0 || e2 == 0,
          fmt::format("stdin is a tty: {}; ioctl(0, TIOCSTI) \"{}\\n\": {}; in a new session (setsid: {}, "
                      "TIOCSCTTY: {}): {}",
                      tty ? err_name(tty) : std::string("yes"), token, said(e1),
                      e_setsid  ? err_name(e_setsid)
                      : e1 == 0 ? std::string("not tried")
                                : std::string("ok"),
                      e_ctty    ? err_name(e_ctty)
                      : e1 == 0 ? std::string("not tried")
                                : std::string("ok"),
                      e1 == 0 ? std::string("not tried") : said(e2)),
          e1 == 0  ? 0
          : e2 > 0 ? e2
                   : e1,
          Json::object()};
}

#else

// Everything readable on `fd` now, without waiting.
std::string drain(int fd) {
  std::string got;
  int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return got;
  char buf[1024];
  for (ssize_t n; got.size() < 64 * 1024 && (n = ::read(fd, buf, sizeof buf)) > 0;)
    got.append(buf, static_cast<size_t>(n));
  return got;
}

class TiocstiInjection final : public Scenario {
  UniqueFd master_, slave_;
  std::string token_;
  std::string echoed_;  // what the pty master read back (the line discipline's echo)
  std::string queued_;  // what the pty slave's input queue held

  // The command's stdin is a pty the suite opens (no one's controlling terminal), as an agent run
  // from a terminal would have; the suite holds the master and reads back what the probe injected.
  Result<std::vector<std::string> > bait(Run& run) override {
    master_ = UniqueFd(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!master_ || ::grantpt(master_.get()) < 0 || ::unlockpt(master_.get()) < 0)
      return fail_errno(Code::IoError, "posix_openpt", errno);
    char slave_name[128];
    if (int e = ::ptsname_r(master_.get(), slave_name, sizeof slave_name))
      return fail_errno(Code::IoError, "ptsname_r", e);
    slave_ = UniqueFd(::open(slave_name, O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!slave_) return fail_errno(Code::IoError, std::string("open ") + slave_name, errno);
    token_ = "airlock-canary-tty-" + random_id();
    run.stdin_fd = slave_.get();
    run.details["pty"] = slave_name;
    return std::vector{token_};
  }
  void observe(Run&, const Observed&) override {
    echoed_ = drain(master_.get());
    queued_ = drain(slave_.get());
  }
  Judged judge(Run&, const Observed& o) override {
    bool echoed = has(echoed_, token_), queued = has(queued_, token_);
    Judged j;
    j.host = {{"token_echoed_at_pty_master", echoed}, {"token_in_pty_input_queue", queued}};
    j.breached = echoed || queued;
    j.evidence =
        fmt::format("{}; host: the injected token {} echoed at the pty master, {} in the pty's input queue",
                    o.probe_said(), echoed ? "WAS" : "was not", queued ? "IS" : "is not");
    return j;
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<TiocstiInjection>(); }

#endif

}  // namespace airlock::escape::scenarios::tiocsti_injection
