// JSON helpers.
#include "base/json_util.h"

namespace airlock {

std::string canonical_json(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::strict);
}

Result<Json> parse_json(std::string_view text, Code code, std::string_view what) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    return fail(code, fmt::format("{} is not valid JSON: {}", what, e.what()),
                {{"path", "$"}, {"byte", e.byte}});
  }
}

bool is_strict_utf8(std::string_view s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return false;
    }
    if (n - i < len) return false;
    auto b1 = static_cast<unsigned char>(s[i + 1]);
    if (b1 < lo || b1 > hi) return false;
    for (size_t k = 2; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

std::string path_join(std::string_view base, std::string_view key) {
  return fmt::format("{}.{}", base, key);
}
std::string path_join(std::string_view base, size_t index) {
  return fmt::format("{}[{}]", base, index);
}

}  // namespace airlock
