// fds: stdio set-up and close-on-exec for everything else.
#include "linux/fds.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace airlock::linux {

int apply_fds(int in, int out, int err) noexcept {
  const int want[3] = {in, out, err};
  for (int target = 0; target < 3; ++target) {
    if (want[target] < 0 || want[target] == target) continue;
    if (::dup2(want[target], target) < 0) return errno;
  }
  // CLOEXEC rather than close: the setup steps still use their descriptors (ruleset, error
  // pipe) until exec, and exec then closes every one of them at once.
  if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) < 0) return errno;
  return 0;
}

}  // namespace airlock::linux
