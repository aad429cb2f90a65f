// caps: drop every capability.
#include "linux/caps.h"

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace airlock::linux {

int apply_drop_capabilities() noexcept {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &hdr, data) != 0) return errno;
  // Emptying the bounding set takes CAP_SETPCAP. A process without it (an unprivileged user on the
  // Landlock tier) keeps a full bounding set it cannot use: it holds nothing to keep, and
  // no_new_privs, set next on every confining tier, stops an exec from gaining anything.
  if (data[0].effective & (1u << CAP_SETPCAP)) {
    for (int cap = 0; cap <= 63; ++cap) {
      if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return errno;
    }
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) return errno;
  __user_cap_data_struct none[2] = {};
  if (::syscall(SYS_capset, &hdr, none) != 0) return errno;
  return 0;
}

}  // namespace airlock::linux
