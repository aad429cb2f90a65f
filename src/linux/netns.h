// netns: a sandbox's network namespace holds only loopback, brought up by its init.
#pragma once

namespace airlock::linux {

// Child side, inside the new network namespace: sets lo up. Returns 0 or an errno.
int apply_loopback_up() noexcept;

}  // namespace airlock::linux
