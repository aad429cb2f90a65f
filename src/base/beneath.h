// beneath: open a path strictly beneath a directory, following no symlink (openat2).
#pragma once

#include <string>

#include "base/error.h"
#include "base/unique_fd.h"

namespace airlock {

// openat2(dirfd, rel, flags, mode) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_MAGICLINKS: ".." out of dirfd, an absolute path and any symlink on the way
// fail (ELOOP / EXDEV), so a path swapped for a symlink is never followed.
// Returns the errno as the error's facts.errno.
Result<UniqueFd> open_beneath(int dirfd, const std::string& rel, int flags, unsigned mode = 0);

}  // namespace airlock
