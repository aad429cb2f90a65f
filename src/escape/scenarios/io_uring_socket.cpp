// io_uring_socket: set up an io_uring, a second way to make syscalls (connect, openat, ...) that a
// seccomp filter on the syscalls themselves never sees. Only the setup is attempted.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>

#include "escape/scenario.h"

#if AIRLOCK_PROBE_SIDE
#include "linux/raw_syscalls.h"
#endif

namespace airlock::escape::scenarios::io_uring_socket {

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput&) {
  uint32_t features = 0;
  int fd = linux::io_uring_setup(8, &features);
  int e = fd < 0 ? errno : 0;
  if (fd >= 0) ::close(fd);
  return {
      {},
      fd >= 0,
      fmt::format("io_uring_setup(8 entries) (syscall 425): {}",
                  fd >= 0 ? fmt::format("GOT A RING (fd {}, features {:#x})", fd, features) : err_name(e)),
      e,
      Json::object()};
}

#else

class IoUringSocket final : public Scenario {
  Result<std::vector<std::string> > bait(Run&) override { return std::vector<std::string>{}; }
  Judged judge(Run&, const Observed& o) override { return judged_by_probe(o); }
};

std::unique_ptr<Scenario> make() { return std::make_unique<IoUringSocket>(); }

#endif

}  // namespace airlock::escape::scenarios::io_uring_socket
