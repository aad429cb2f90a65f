// SHA-256 helpers (OpenSSL) returning lowercase hex.
#pragma once

#include <string>
#include <string_view>

#include "base/error.h"

namespace airlock {

std::string sha256_hex(std::string_view bytes);
// Streams a file through SHA-256.
Result<std::string> sha256_file(const std::string& path);
// Standard base64 with padding (RFC 4648).
std::string base64_encode(std::string_view bytes);
// 16 random bytes as hex, for session ids.
std::string random_id();

}  // namespace airlock
