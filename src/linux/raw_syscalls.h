// raw_syscalls: the system calls glibc does not wrap (io_uring_setup, clone3, capget, the keyrings),
// each as one plain call. The escape suite's probes attempt them inside a sandbox
// (src/escape/scenarios/); they live here because their kernel headers may only be included here
// (STYLE.md rule 1). Nothing here confines anything, and nothing is called by airlock itself.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string_view>

namespace airlock::linux {

// io_uring_setup(entries): a ring's descriptor (the caller closes it), with the kernel's feature
// bits in *features; or -1 with errno.
int io_uring_setup(unsigned entries, uint32_t* features);
// clone3 with CLONE_NEWUSER and SIGCHLD, on the caller's stack as fork does: 0 in the child, the
// child's pid in the parent, or -1 with errno. Its flags are in memory, where a seccomp filter
// cannot read them.
long clone3_new_user_namespace();
// capget(2) of this process (version 3): the effective and permitted sets, or -1 with errno.
int capget_self(uint64_t* effective, uint64_t* permitted);
// keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL): the new session keyring's serial, or -1 with errno.
long join_session_keyring();
// add_key("user", description, payload) to the session keyring: its serial, or -1 with errno.
long add_user_key_to_session_keyring(const char* description, std::string_view payload);
// keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 0): the user keyring's serial (shared by
// every process of the uid), or -1 with errno.
long user_keyring_id();

}  // namespace airlock::linux
