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

int close_all_but(int* keep, size_t n) noexcept {
  for (size_t i = 1; i < n; ++i)  // insertion sort: a handful of descriptors, no allocation
    for (size_t j = i; j > 0 && keep[j - 1] > keep[j]; --j) {
      int t = keep[j];
      keep[j] = keep[j - 1];
      keep[j - 1] = t;
    }
  unsigned next = 3;
  for (size_t i = 0; i < n; ++i) {
    if (keep[i] < static_cast<int>(next)) continue;
    unsigned k = static_cast<unsigned>(keep[i]);
    if (k > next && ::syscall(SYS_close_range, next, k - 1, 0) < 0) return errno;
    next = k + 1;
  }
  if (::syscall(SYS_close_range, next, ~0U, 0) < 0) return errno;
  return 0;
}

}  // namespace airlock::linux
