// The action protocol: one JSON request in, one JSON response out, over a Session.
#pragma once

#include "base/json_util.h"
#include "broker/session.h"

namespace airlock::broker {

// Request:  {"id": <any, echoed>, "action": "read_file" | "write_file" | "list_dir" |
//            "http_fetch" | "run_tool" | "receipts" | "close" | "kill", ...its arguments}
// Response: {"id": …, "ok": true, "result": {…}} or {"id": …, "ok": false, "error": {code, message, facts}}
// A request that is not an object, names no known action, or carries an unknown or mistyped
// argument is AIRLOCK_PROTOCOL_ERROR with the JSON path of the offence; nothing is done.
// The same adapter serves the pipe (`airlock session`) and the server.
Json handle_request(Session& s, const Json& request);

// The action a request names ("" when it names none): the pipe's reader acts on "kill" at once.
std::string request_action(const Json& request);

}  // namespace airlock::broker
