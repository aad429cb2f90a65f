// fds: every descriptor but 0-2 is closed at exec; stdio can be replaced first.
#pragma once

#include <cstddef>

namespace airlock::linux {

// Child side: dup2 the given descriptors onto 0, 1, 2 (-1 keeps the inherited one) and `fd3`
// onto 3 (-1: none), then mark every other descriptor close-on-exec. Returns 0 or an errno.
// Allocation-free.
int apply_fds(int in, int out, int err, int fd3 = -1) noexcept;

// Closes every descriptor from 3 up but the `n` in `keep` (any order; negative ones ignored; the
// array is sorted in place). For a process forked from a threaded daemon that holds other runs'
// pipes: what it keeps open, their readers never see end of file for. Allocates nothing.
int close_all_but(int* keep, size_t n) noexcept;

}  // namespace airlock::linux
