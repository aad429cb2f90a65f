// The code table's functions: names, meanings and JSON form of Error.
#include "base/error.h"

#include <array>
#include <cstring>

namespace airlock {

std::string_view to_name(Code code) {
  switch (code) {
#define AIRLOCK_X(e, name, meaning) \
  case Code::e:                     \
    return name;
    AIRLOCK_CODES(AIRLOCK_X)
#undef AIRLOCK_X
  }
  return "AIRLOCK_UNKNOWN";
}

std::string_view meaning(Code code) {
  switch (code) {
#define AIRLOCK_X(e, name, meaning) \
  case Code::e:                     \
    return meaning;
    AIRLOCK_CODES(AIRLOCK_X)
#undef AIRLOCK_X
  }
  return "";
}

namespace {
constexpr std::array kAllCodes = {
#define AIRLOCK_X(e, name, meaning) Code::e,
    AIRLOCK_CODES(AIRLOCK_X)
#undef AIRLOCK_X
};
}  // namespace

std::span<const Code> all_codes() { return kAllCodes; }

std::optional<Code> code_from_name(std::string_view name) {
  for (Code c : kAllCodes)
    if (to_name(c) == name) return c;
  return std::nullopt;
}

Error& Error::context(std::string_view what) & {
  message = fmt::format("{}: {}", what, message);
  return *this;
}
Error&& Error::context(std::string_view what) && {
  message = fmt::format("{}: {}", what, message);
  return std::move(*this);
}
Error&& Error::fact(std::string key, nlohmann::json value) && {
  facts[std::move(key)] = std::move(value);
  return std::move(*this);
}

nlohmann::json Error::to_json() const {
  return {{"code", to_name(code)}, {"message", message}, {"facts", facts}};
}

std::optional<Error> Error::from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("code") || !j["code"].is_string()) return std::nullopt;
  auto c = code_from_name(j["code"].get<std::string>());
  if (!c) return std::nullopt;
  Error e{*c, "", nlohmann::json::object()};
  if (auto m = j.find("message"); m != j.end()) {
    if (!m->is_string()) return std::nullopt;
    e.message = m->get<std::string>();
  }
  if (auto f = j.find("facts"); f != j.end()) {
    if (!f->is_object()) return std::nullopt;
    e.facts = *f;
  }
  return e;
}

std::unexpected<Error> fail_errno(Code code, std::string what, int err) {
  nlohmann::json facts = {{"errno", err}, {"errno_name", strerrorname_np(err) ? strerrorname_np(err) : ""}};
  return std::unexpected(Error{code, fmt::format("{}: {}", what, std::strerror(err)), facts});
}

}  // namespace airlock
