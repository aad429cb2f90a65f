// Byte encodings: strict UTF-8 validation and base64 (OpenSSL), for putting bytes in JSON.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace airlock {

// Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF.
bool is_valid_utf8(std::string_view bytes);
// `bytes` with every byte that starts no well-formed sequence replaced by U+FFFD: valid UTF-8
// is returned as is. Lossy: keep the exact bytes beside it (json_util.h repair_utf8 does).
std::string lossy_utf8(std::string_view bytes);
std::string base64_encode(std::string_view bytes);
// nullopt when `text` is not canonical base64.
std::optional<std::string> base64_decode(std::string_view text);
// A name from a sandbox made safe to print on one terminal line, losslessly: a backslash, a control
// character (C0, DEL, C1) and, in text that is not UTF-8, every byte above 0x7f becomes an escape
// (\\, \n, \t, \r, \xNN, \u0085). Anything else passes unchanged.
std::string escape_for_terminal(std::string_view bytes);

}  // namespace airlock
