// The HTTP status of every AIRLOCK_ code: the one place the API derives a status from a code.
#pragma once

#include "base/error.h"

namespace airlock::server {

// Exhaustive over the code table (-Werror=switch): a new code cannot ship without a status.
int http_status(Code code);

// The Error in a protocol answer's "error" member. Tolerant where Error::from_json is strict:
// some broker refusals carry null facts, and a code this build does not know is a ProtocolError.
Error answer_error(const nlohmann::json& error);

}  // namespace airlock::server
