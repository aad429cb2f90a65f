// beneath: openat2 with the strict resolve flags.
#include "base/beneath.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace airlock {

Result<UniqueFd> open_beneath(int dirfd, const std::string& rel, int flags, unsigned mode) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = (flags & O_CREAT) ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd;
  do {
    fd = ::syscall(SYS_openat2, dirfd, rel.empty() ? "." : rel.c_str(), &how, sizeof how);
  } while (fd < 0 && errno == EAGAIN);
  if (fd < 0) return fail_errno(Code::PathDenied, "cannot open " + rel + " beneath its root", errno);
  return UniqueFd(static_cast<int>(fd));
}

}  // namespace airlock
