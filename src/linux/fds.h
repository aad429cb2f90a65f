// fds: every descriptor but 0-2 is closed at exec; stdio can be replaced first.
#pragma once

namespace airlock::linux {

// Child side: dup2 the given descriptors onto 0, 1, 2 (-1 keeps the inherited one) and `fd3`
// onto 3 (-1: none), then mark every other descriptor close-on-exec. Returns 0 or an errno.
// Allocation-free.
int apply_fds(int in, int out, int err, int fd3 = -1) noexcept;

}  // namespace airlock::linux
