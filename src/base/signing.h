// Ed25519 signatures (OpenSSL): records one machine writes and another must be able to trust.
#pragma once

#include <string>
#include <string_view>

#include "base/error.h"

namespace airlock {

inline constexpr size_t kEd25519SeedBytes = 32, kEd25519PublicBytes = 32, kEd25519SignatureBytes = 64;

// A new private key: its 32-byte seed, from the kernel's random source.
Result<std::string> ed25519_new_seed();
// The 32-byte public key of a seed.
Result<std::string> ed25519_public_key(std::string_view seed);
// The 64-byte signature of `message` under `seed`.
Result<std::string> ed25519_sign(std::string_view seed, std::string_view message);
// Whether `signature` is `public_key`'s over `message`; anything malformed is false.
bool ed25519_verify(std::string_view public_key, std::string_view message, std::string_view signature);

}  // namespace airlock
