// The MCP server over one session: JSON-RPC 2.0 messages in, responses out; tools are the broker's actions.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "base/json_util.h"
#include "broker/session.h"
#include "policy/task_policy.h"

namespace airlock::server {

// The protocol revisions this server speaks, newest first; an initialize asking for another
// gets the newest (the client then decides).
inline constexpr std::string_view kMcpRevisions[] = {"2025-06-18", "2025-03-26"};

// JSON-RPC error codes used here.
inline constexpr int kParseError = -32700, kInvalidRequest = -32600, kMethodNotFound = -32601,
                     kInvalidParams = -32602;

// Tools: read_file, write_file, list_dir, http_fetch, and one per declared tool (named as
// declared; "run_" + name if that collides with one of the four). The session outlives this.
class McpServer {
 public:
  McpServer(broker::Session& s, policy::TaskPolicy policy) : s_(&s), policy_(std::move(policy)) {}
  // A server whose session could not open (the policy does not load, no executor can enforce
  // it): it still answers initialize and ping, lists the built-in tools, and answers every
  // tools/call with `why`, so the client shows the reason rather than a closed connection.
  explicit McpServer(Error why) : s_(nullptr), unavailable_(std::move(why)) {}
  // One message (or a batch): its response, or nullopt for a notification or a response.
  std::optional<Json> handle(const Json& message);
  // Sends the client a request and waits for its answer (the stdio loop's): what lets a call held
  // for approval be answered in the client, by MCP elicitation, when the client offers it.
  using ClientRequest = std::function<Result<Json>(const std::string& method, const Json& params)>;
  void set_client_request(ClientRequest r) { client_request_ = std::move(r); }
  // The tools/list result.
  Json tools() const;

 private:
  Json handle_one(const Json& message, bool& answered);
  Json call_tool(const Json& params, int& rpc_error, std::string& rpc_message);
  // A call held for approval, asked of the client's user by elicitation: the answer, recorded as
  // the approval's (or denial's), and the call's new response; nullopt when nothing was decided.
  std::optional<Json> elicit_approval(const Json& request, const Error& held);
  std::string declared_name(const policy::Tool& t) const;

  broker::Session* s_;
  policy::TaskPolicy policy_;
  std::optional<Error> unavailable_;
  ClientRequest client_request_;
  bool client_elicits_ = false;  // the client declared the elicitation capability at initialize
};

// What a model reads when the policy refuses: the code and message, what the policy allows
// instead, and that another route to the same thing is refused too.
std::string explain_refusal(const Error& e, const policy::TaskPolicy& policy, const plan::ExecutionPlan& plan);

// What a model reads when the session could not open at all.
std::string explain_unavailable(const Error& e);

// A JSON-RPC error response.
Json rpc_error(const Json& id, int code, const std::string& message);

}  // namespace airlock::server
