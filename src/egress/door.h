// The network door: the one way out of a sandbox whose policy says `code_network: allowlist`.
// An HTTP proxy airlock serves outside the sandbox on a listening socket made inside it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "base/json_util.h"
#include "base/unique_fd.h"
#include "egress/egress.h"
#include "policy/task_policy.h"

namespace airlock::egress {

// The model gateway an agent run's door serves (policy::AgentProfile::ModelGateway, with the key):
// a request in origin form (`POST /v1/messages`), or in absolute form for the door's own address,
// is the agent asking its model. It must carry `prefix + placeholder` in `header`; it is admitted
// as `upstream + path` by the same rules as every other request, sent over TLS with the
// certificate verified and `header` set to `prefix + secret`, and the answer streamed back. The
// secret exists only in this process: never in the sandbox, a receipt or an error.
struct ModelGateway {
  std::string upstream;  // https://host[:port]
  std::string header;    // lower-case
  std::string prefix;
  std::string placeholder;
  std::string secret;
  std::string ca_file;  // the upstream's trust store; empty: the system's
  // The paths the agent may ask for (each with what lies below it); any other is refused. Empty:
  // every path. A path with a dot segment, an encoded dot or slash, or an empty segment is refused
  // whatever the list says (the upstream client would resolve it elsewhere).
  std::vector<std::string> paths;
  size_t max_concurrent = 8;  // model requests in flight at once; more are answered 503
  uint64_t timeout_ms = 600000;
  uint64_t max_request_bytes = 32 << 20;
  uint64_t max_response_bytes = 256 << 20;
};

struct DoorOptions {
  std::vector<policy::EgressRule> rules;  // the policy's code_network rules
  Resolver resolve;                       // the door resolves names itself; the sandbox cannot
  // Called once per request, from the door's threads, with the receipt body: what was asked, the
  // addresses resolved, the address connected, bytes each way, allowed or refused and why.
  std::function<void(Json)> record;
  uint64_t connect_timeout_ms = 10000;
  size_t max_connections = 256;  // more at once are answered 503
  std::optional<ModelGateway> gateway;
};

// Serves `listener` (a listening TCP socket) until destroyed. Each connection may ask:
//   CONNECT host:port      admitted as https://host:port/, then a byte tunnel to the pinned address;
//   METHOD http://...      admitted as that URL, forwarded to the pinned address with
//                          `Connection: close`; every request on a kept-alive client connection
//                          is admitted on its own;
//   METHOD /path           the model gateway (above), when the door has one.
// Admission is egress::admit (the check http_fetch makes): every resolved address checked, the
// connection made to the checked address and never to a second lookup. Anything else is answered
// with an HTTP error whose body is `airlock: refused: CODE: message` and the rules that are allowed.
class DoorServer {
 public:
  static Result<std::unique_ptr<DoorServer>> start(DoorOptions opts, UniqueFd listener);
  // Stops accepting, ends every connection and joins every thread.
  ~DoorServer();
  DoorServer(const DoorServer&) = delete;
  DoorServer& operator=(const DoorServer&) = delete;

  struct State;

 private:
  explicit DoorServer(std::shared_ptr<State> st) : st_(std::move(st)) {}
  std::shared_ptr<State> st_;
};

// A request or response head as the door reads it: the first line, and the fields with their
// names lower-cased and values trimmed. Pure; the door, the tests and the fuzz target share it.
struct ProxyHead {
  std::string first;  // request or status line
  std::vector<std::pair<std::string, std::string>> fields;
  std::string get(std::string_view name) const;  // the first field of that name, or ""
  bool has(std::string_view name) const;
};
// `text` is a head up to and including its blank line. nullopt: a field line without a name or
// with white space in its name (a request smuggler's favourite).
std::optional<ProxyHead> parse_proxy_head(std::string_view text);

// How a message's body ends.
struct Framing {
  enum Kind { None, Length, Chunked, UntilClose, Invalid } kind = None;
  uint64_t length = 0;
};
// Invalid: a transfer-encoding other than chunked, or Content-Length values that disagree or
// are not 1 to 18 digits.
Framing body_framing(const ProxyHead& h, bool is_request);

// "host api.example.com ports [443] schemes [https]; cidr 10.0.0.0/8 ports [80] schemes [http]"
std::string describe_rules(const std::vector<policy::EgressRule>& rules);

// Whether a model gateway admits `path` (origin form, query included) under `allowed`
// (ModelGateway::paths). Pure; the door and its tests share it.
bool gateway_path_allowed(std::string_view path, const std::vector<std::string>& allowed);

}  // namespace airlock::egress
