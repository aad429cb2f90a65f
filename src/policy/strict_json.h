// Strict JSON readers shared by the policy and agent-profile parsers: every refusal is
// AIRLOCK_POLICY_INVALID with the JSON path of the offence in facts.path.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "base/json_util.h"

namespace airlock::policy {

std::unexpected<Error> invalid(const std::string& path, std::string message);
Result<void> require_object(const Json& v, const std::string& path);
// Refuses the first key of `obj` that is not in `allowed`.
Result<void> check_keys(const Json& obj, const std::string& path, std::span<const std::string_view> allowed);
Result<std::string> get_string(const Json& v, const std::string& path);
Result<std::string> get_nonempty_string(const Json& v, const std::string& path);
Result<bool> get_bool(const Json& v, const std::string& path);
Result<std::vector<std::string>> get_string_array(const Json& v, const std::string& path);

}  // namespace airlock::policy
