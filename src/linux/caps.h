// caps: a sandboxed command keeps no capability, in its user namespace or anywhere.
#pragma once

namespace airlock::linux {

// Child side: empties the bounding and ambient sets, then the effective, permitted and
// inheritable sets, so not even uid 0 inside regains a capability at exec. Returns 0 or an errno.
int apply_drop_capabilities() noexcept;

}  // namespace airlock::linux
