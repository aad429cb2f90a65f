// tty: save and restore the termios of the terminals a command inherits.
#include "linux/tty.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace airlock::linux {

TerminalModes TerminalModes::prepare(std::array<int, 3> fds) {
  TerminalModes t;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i] < 0 || !::isatty(fds[i])) continue;
    if (::tcgetattr(fds[i], &t.saved_[i].modes) == 0) t.saved_[i].fd = fds[i];
  }
  return t;
}

namespace {

bool same_modes(const termios& a, const termios& b) {
  return a.c_iflag == b.c_iflag && a.c_oflag == b.c_oflag && a.c_cflag == b.c_cflag && a.c_lflag == b.c_lflag &&
         std::memcmp(a.c_cc, b.c_cc, sizeof a.c_cc) == 0;
}

}  // namespace

void TerminalModes::release() noexcept {
  for (auto& s : saved_) {
    if (s.fd < 0) continue;
    termios now{};
    if (::tcgetattr(s.fd, &now) == 0 && !same_modes(now, s.modes)) {
      // SIGTTOU blocked: airlock in a background process group restores the modes rather than
      // being stopped for it. TCSANOW: the command is gone, nothing of its output is left to drain.
      sigset_t ttou, old;
      sigemptyset(&ttou);
      sigaddset(&ttou, SIGTTOU);
      ::pthread_sigmask(SIG_BLOCK, &ttou, &old);
      while (::tcsetattr(s.fd, TCSANOW, &s.modes) < 0 && errno == EINTR) {
      }
      ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    }
    s.fd = -1;
  }
}

}  // namespace airlock::linux
