// fds: stdio set-up and close-on-exec for everything else.
#include "linux/fds.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace airlock::linux {

int apply_fds(int in, int out, int err, int fd3) noexcept {
  const int want[4] = {in, out, err, fd3};
  for (int target = 0; target < 4; ++target) {
    if (want[target] < 0 || want[target] == target) continue;
    if (::dup2(want[target], target) < 0) return errno;
  }
  // dup2 cleared close-on-exec on the copy; a descriptor already at 3 keeps its own flag.
  if (fd3 == 3 && ::fcntl(3, F_SETFD, 0) < 0) return errno;
  // CLOEXEC rather than close: the setup steps still use their descriptors (ruleset, error
  // pipe) until exec, and exec then closes every one of them at once.
  unsigned first = fd3 >= 0 ? 4U : 3U;
  if (::syscall(SYS_close_range, first, ~0U, CLOSE_RANGE_CLOEXEC) < 0) return errno;
  return 0;
}

}  // namespace airlock::linux
