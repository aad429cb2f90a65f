// JSON helpers: canonical form, and parsing text into Result<json> with a code.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace airlock {

using Json = nlohmann::json;

// Canonical serialisation: keys sorted (nlohmann's object is ordered by key), no
// whitespace, UTF-8 kept as is. Two equal values always give the same bytes.
std::string canonical_json(const Json& j);

// Parses JSON text; a syntax error is `code` with the byte offset in facts.
Result<Json> parse_json(std::string_view text, Code code, std::string_view what);


// Appends a JSON-pointer-like path segment: path_join("$.tools", 2) == "$.tools[2]".
std::string path_join(std::string_view base, std::string_view key);
std::string path_join(std::string_view base, size_t index);

}  // namespace airlock
