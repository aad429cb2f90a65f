// raw_syscalls: io_uring_setup, clone3, capget and the keyring calls through syscall(2).
#include "linux/raw_syscalls.h"

#include <linux/capability.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace airlock::linux {

int io_uring_setup(unsigned entries, uint32_t* features) {
  io_uring_params params{};
  // SYS_io_uring_setup is 425 on every architecture; glibc's headers may predate it.
  long fd = ::syscall(425, entries, &params);
  if (fd >= 0 && features) *features = params.features;
  return static_cast<int>(fd);
}

long clone3_new_user_namespace() {
  clone_args ca{};
  ca.flags = CLONE_NEWUSER;
  ca.exit_signal = SIGCHLD;
  return ::syscall(SYS_clone3, &ca, sizeof ca);
}

int capget_self(uint64_t* effective, uint64_t* permitted) {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &hdr, data) < 0) return -1;
  *effective = (uint64_t{data[1].effective} << 32) | data[0].effective;
  *permitted = (uint64_t{data[1].permitted} << 32) | data[0].permitted;
  return 0;
}

long join_session_keyring() { return ::syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, nullptr); }

long add_user_key_to_session_keyring(const char* description, std::string_view payload) {
  return ::syscall(SYS_add_key, "user", description, payload.data(), payload.size(),
                   KEY_SPEC_SESSION_KEYRING);
}

long user_keyring_id() { return ::syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 0); }

}  // namespace airlock::linux
