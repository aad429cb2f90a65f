// JSON helpers: canonical form, the one parser of untrusted JSON text, and lossless UTF-8 repair.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace airlock {

using Json = nlohmann::json;

// Canonical serialisation: keys sorted (nlohmann's object is ordered by key), no
// whitespace, UTF-8 kept as is. Two equal values always give the same bytes.
// Throws on a string that is not UTF-8: run repair_utf8 first on anything from outside.
std::string canonical_json(const Json& j);

// Nesting deeper than this is refused at parse time. nlohmann's dump() and comparisons recurse,
// so a bound here is what keeps a hostile document from overflowing the stack later.
inline constexpr size_t kMaxJsonDepth = 128;
// The largest JSON text read from outside unless a caller sets less (HTTP bodies, lines).
inline constexpr size_t kMaxJsonBytes = 16u << 20;

struct JsonLimits {
  size_t max_bytes = kMaxJsonBytes;
  size_t max_depth = kMaxJsonDepth;
  // nlohmann keeps the last of duplicate keys; another reader might keep the first. A document
  // two readers see differently is refused unless a caller says otherwise.
  bool allow_duplicate_keys = false;
};

// The one way text from outside (policies, protocol lines, HTTP bodies, tool output, ledger and
// receipt files) becomes Json. Refuses, as `code` with facts.path (JSON path) and facts.byte
// where known: text larger than limits.max_bytes, nesting deeper than limits.max_depth, a
// duplicate key, a number that overflows a double (1e400), and anything that is not one JSON
// value in UTF-8. Builds the value without recursion; never throws; every message is UTF-8.
Result<Json> parse_json(std::string_view text, Code code, std::string_view what, JsonLimits limits = {});

// Nesting deeper than this is cut off by repair_utf8: a last line of defence for values built
// in memory, above kMaxJsonDepth so that parsed values wrapped in a record are never cut.
inline constexpr size_t kMaxRecordDepth = 512;

// Makes `value` serialisable whatever bytes its strings hold, losing nothing: every string or
// object key that is not valid UTF-8 becomes its lossy form (lossy_utf8), and its exact bytes are
// returned as [{"pointer": RFC 6901 pointer to the lossy string (or key, with "key": true),
// "base64": the exact bytes}]. A subtree nested deeper than kMaxRecordDepth becomes null and is
// listed with "dropped". Returns an empty array when nothing changed. Iterative; never throws
// (but std::bad_alloc).
Json repair_utf8(Json& value);

// canonical_json of `j` after repair_utf8, for digests of values that may hold a sandbox's bytes:
// {"value": repaired, "not_utf8": exact bytes} when anything was repaired, so two values that
// differ only in bytes that are not UTF-8 never share a digest. Never throws on an encoding.
std::string lossless_canonical_json(Json j);

// Appends a JSON-pointer-like path segment: path_join("$.tools", 2) == "$.tools[2]".
std::string path_join(std::string_view base, std::string_view key);
std::string path_join(std::string_view base, size_t index);

}  // namespace airlock
