// caps: a sandboxed command keeps no capability, in its user namespace or anywhere.
#pragma once

namespace airlock::linux {

// Child side: empties the bounding and ambient sets, then the effective, permitted and
// inheritable sets, so not even uid 0 regains a capability at exec. A process that may not empty
// the bounding set (no CAP_SETPCAP: an unprivileged user) holds no capability to begin with, and
// no_new_privs keeps an exec from granting one. Returns 0 or an errno.
int apply_drop_capabilities() noexcept;

}  // namespace airlock::linux
