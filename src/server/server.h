// The HTTP API over the broker: sessions by id, one route per action, on a unix socket and loopback TCP.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/error.h"
#include "base/json_util.h"
#include "exec/tool_program.h"
#include "plan/plan.h"
#include "server/framing.h"
#include "policy/task_policy.h"

namespace airlock::server {

// One route the server answers. `path` is in OpenAPI template form ("/v1/sessions/{id}/kill"):
// the server registers exactly these, and the OpenAPI test compares its document with them.
struct Route {
  std::string_view method;  // "GET" or "POST"
  std::string_view path;
};
std::span<const Route> routes();

// The OpenAPI 3 document served at /v1/openapi.json (src/server/openapi.json, built in).
std::string_view openapi_json();

// The operator console's files (src/server/console/, built in), served at their paths under
// /ui/ on every listener without credentials: they hold no data, and every call they make
// carries the operator's token in a header (docs/console.md).
struct ConsoleFile {
  std::string_view path, content_type, body;
};
std::span<const ConsoleFile> console_files();

struct ServerOptions {
  std::string state_dir;
  plan::Profile profile = plan::Profile::Production;
  // What a posted task policy is layered over: the worker's defaults or the built-in default.
  policy::TaskPolicy base_policy = policy::builtin_default();
  // GET /v1/executors: the doctor report, supplied by the caller (the CLI owns the doctor).
  std::function<Json()> executors_report;
  // The operator's bearer token for the approval routes (GET /v1/approvals, POST
  // /v1/approvals/{id}) on every listener; empty: the server takes no approvals.
  std::string operator_token;
  // Fresh credentials for each json-protocol dispatch in every session (SessionOptions::credentials).
  std::optional<exec::CredentialProvider> credentials;
  size_t max_body_bytes = 8u << 20;
  // Every connection is held to these before httplib reads it (server/framing.h); the body
  // bound is max_body_bytes, whatever the transfer encoding.
  size_t max_headers = 100;
  size_t max_head_bytes = 64u << 10;
  uint64_t request_seconds = 30;  // from a request's first byte to its last; 0: no bound
  FramingLimits framing() const {
    FramingLimits l;
    l.request_ms = request_seconds * 1000;
    l.max_headers = max_headers;
    l.max_head_bytes = max_head_bytes;
    l.max_body_bytes = max_body_bytes;
    return l;
  }
  // Worker threads per listener. A running tool holds one for its whole run, so this bounds
  // how many requests are served at once; kill and other sessions need a free one.
  size_t threads = 64;
  size_t max_sessions = 256;
  // A session no request has touched for this long is killed (reason "idle"); 0: never.
  // Sessions whose budget is spent, killed or closed stop counting against max_sessions as
  // soon as the reaper sees them (every reap_interval_ms, and before each open).
  uint64_t idle_seconds = 900;
  uint64_t reap_interval_ms = 1000;
  // New sessions are refused (AIRLOCK_CAPACITY_EXHAUSTED) while the state directory's receipts
  // and session views hold more than this; 0: no bound.
  uint64_t max_state_bytes = 0;
  // A session's receipts file stops growing with refusals past this many bytes (they are
  // counted into refusals.suppressed instead), and admits no action; 0: no bound.
  uint64_t max_session_receipt_bytes = 16u << 20;
  // Guests each microvm session keeps booted ahead (SessionOptions::vm_pool).
  size_t vm_pool = 0;
  // A posted session with "machine" is opened by this airlock with its global options
  // (`COMMAND… session --machine NAME`); empty: such a session is refused.
  std::vector<std::string> dispatch_command;
};

// A request body as a JSON object (blank: an empty object), parsed as any untrusted JSON
// (json_util.h parse_json); anything else is `code` with the JSON path of the offence.
Result<Json> parse_request_body(std::string_view body, Code code = Code::ProtocolError);

// A token file: a regular file owned by the caller that no one else may read or write
// (refused by name with AIRLOCK_CUSTODY_UNSAFE otherwise); its content, trailing space trimmed.
Result<std::string> read_token_file(const std::string& path);

// "127.0.0.1:PORT" or "[::1]:PORT" (PORT 0: any free port). Anything but loopback is refused.
struct ListenAddress {
  std::string host;
  int port = 0;
};
Result<ListenAddress> parse_listen(const std::string& spec);

class Server {
 public:
  // Owns the sessions it opens. Exceptions from handlers never leave it (they become 500s).
  explicit Server(ServerOptions opts);
  ~Server();
  Server(const Server&) = delete;

  // Binds a unix socket at `path` (mode 0600; a stale socket is replaced, a live one refused).
  Result<void> bind_unix(const std::string& path);
  // Binds a loopback TCP listener whose every request must carry `Authorization: Bearer TOKEN`.
  // Returns the bound port.
  Result<int> bind_tcp(const ListenAddress& at, std::string token);
  // Starts accepting on every bound listener (one thread each, plus their worker pools).
  void start();
  // Graceful stop: refuses new sessions, kills every open one (recorded as killed, nothing
  // written back), lets running handlers answer, stops the listeners and removes the socket.
  void shutdown(std::string_view why);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace airlock::server
