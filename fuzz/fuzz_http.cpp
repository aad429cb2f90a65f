// Fuzz target: the HTTP API's request handling short of the socket: the connection's bytes as the
// request framer checks them (the same verdict however the bytes are split into reads), the body
// as the server parses it, then what POST /v1/sessions does with it (a policy layer), and the
// error reply it makes.
#include "fuzz_support.h"
#include "policy/task_policy.h"
#include "server/framing.h"
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
  std::string_view bytes = fuzz::as_text(data, size);
  server::FramingLimits limits;
  limits.max_headers = 8, limits.max_head_bytes = 512, limits.max_body_bytes = 1024;
  server::RequestFramer whole(limits), split(limits);
  bool whole_ok = whole.feed(bytes).has_value();
  bool split_ok = true;
  for (size_t at = 0, step = 1; at < bytes.size() && split_ok; at += step, step = step % 7 + 1)
    split_ok = split.feed(bytes.substr(at, step)).has_value();
  FUZZ_CHECK(whole_ok == split_ok, "the framer's verdict does not depend on how the bytes arrive");
  FUZZ_CHECK(whole_ok == !whole.refused().has_value(), "a refusal is kept");
  if (whole.refused()) reply(*whole.refused());
  FUZZ_CHECK(!whole_ok || whole.idle() == split.idle(), "both readers end in the same state");

  auto body = server::parse_request_body(bytes);
  if (!body) return reply(body.error()), 0;
  FUZZ_CHECK(body->is_object(), "a parsed body is an object");
  auto pol = policy::parse_layer(*body, base);
  if (!pol) return reply(pol.error()), 0;
  (void)canonical_json(policy::to_json(*pol));
  return 0;
}
