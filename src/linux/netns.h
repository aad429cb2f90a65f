// netns: a sandbox's network namespace holds only loopback, brought up by its init, and (for a
// code_network allowlist) the door's listening socket, made there and handed to airlock outside.
#pragma once

#include <cstdint>
#include <string>

#include "base/error.h"
#include "base/unique_fd.h"

namespace airlock::linux {

// Child side, inside the new network namespace: sets lo up. Returns 0 or an errno.
int apply_loopback_up() noexcept;

// The door's channel: a unix socket pair. The sandbox's init gets `inside`, airlock keeps `outside`.
struct DoorChannel {
  UniqueFd outside, inside;
};
Result<DoorChannel> prepare_door_channel();

// Child side (the init, in the new network namespace, after loopback is up): makes a TCP socket
// listening on `address`:`port` (IPv4 text, e.g. "127.0.0.1"), sends it over `channel` and closes
// both, so the command inherits neither. Returns 0 or an errno. Allocation-free.
int apply_door_listener(int channel, const char* address, uint16_t port) noexcept;

// Parent side: the listening socket the init sent. The init's exit before sending (a failed setup
// step) is EOF here: AIRLOCK_EXECUTOR_UNAVAILABLE, and the door does not start.
Result<UniqueFd> receive_door_listener(int channel);

}  // namespace airlock::linux
