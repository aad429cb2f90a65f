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


std::string path_join(std::string_view base, std::string_view key) {
  return fmt::format("{}.{}", base, key);
}
std::string path_join(std::string_view base, size_t index) {
  return fmt::format("{}[{}]", base, index);
}

}  // namespace airlock
