// Fuzz target: the HTTP API's request handling short of the socket: the body as the server parses
// it, then what POST /v1/sessions does with it (a policy layer), and the error reply it makes.
#include "fuzz_support.h"
#include "policy/task_policy.h"
#include "server/http_status.h"
#include "server/server.h"

using namespace airlock;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const policy::TaskPolicy base = policy::builtin_default();
  auto reply = [](const Error& e) {
    int status = server::http_status(e.code);
    FUZZ_CHECK(status >= 400 && status < 600, "a refusal is an HTTP error");
    FUZZ_CHECK(e.code != Code::ProtocolError || status == 400, "a malformed body is a 400");
    (void)Json{{"error", e.to_json()}}.dump(-1, ' ', false, Json::error_handler_t::replace);
  };
  auto body = server::parse_request_body(fuzz::as_text(data, size));
  if (!body) return reply(body.error()), 0;
  FUZZ_CHECK(body->is_object(), "a parsed body is an object");
  auto pol = policy::parse_layer(*body, base);
  if (!pol) return reply(pol.error()), 0;
  (void)canonical_json(policy::to_json(*pol));
  return 0;
}
