// MCP over one session: initialize, ping, tools/list, tools/call; refusals a model can act on.
#include "server/mcp.h"

#include <fmt/ranges.h>

#include "broker/approvals.h"
#include "broker/protocol.h"
#include "server/http_status.h"

namespace airlock::server {

namespace {

constexpr std::string_view kBuiltins[] = {"read_file", "write_file", "list_dir", "http_fetch"};

Json object_schema(Json properties, std::vector<std::string> required = {}) {
  Json s = {{"type", "object"}, {"properties", std::move(properties)}, {"additionalProperties", false}};
  if (!required.empty()) s["required"] = required;
  return s;
}

std::string prefixes(const std::vector<std::string>& paths) {
  if (paths.empty()) return "nothing";
  std::vector<std::string> shown;
  for (const auto& p : paths) shown.push_back(p == "." ? "the whole workspace" : p + "/");
  return fmt::format("{}", fmt::join(shown, ", "));
}

std::string egress_rules(const std::vector<policy::EgressRule>& rules) {
  if (rules.empty()) return "no destination at all (http_fetch is off for this task)";
  std::vector<std::string> shown;
  for (const auto& r : rules)
    shown.push_back(fmt::format("{} (schemes {}, ports {})", r.host ? *r.host : r.cidr.value_or("?"),
                                fmt::join(r.schemes, "/"), fmt::join(r.ports, "/")));
  return fmt::format("{}", fmt::join(shown, "; "));
}

std::string tool_list(const std::vector<policy::Tool>& tools) {
  if (tools.empty()) return "none";
  std::vector<std::string> shown;
  for (const auto& t : tools) shown.push_back(t.name + (t.allow_args ? " (takes arguments)" : " (no arguments)"));
  return fmt::format("{}", fmt::join(shown, ", "));
}

Json text_result(std::string text, bool is_error) {
  return {{"content", Json::array({{{"type", "text"}, {"text", std::move(text)}}})}, {"isError", is_error}};
}

// MCP tool annotations (hints a client shows and may act on: ask before a destructive call).
Json hints(bool read_only, bool destructive, bool idempotent, bool open_world) {
  return {{"readOnlyHint", read_only}, {"destructiveHint", destructive}, {"idempotentHint", idempotent},
          {"openWorldHint", open_world}};
}

// A tool run as a model reads it: what it printed first, then how it ended; the figures stay in
// structuredContent. isError when the command did not exit 0 (a failing test suite is a failure).
Json tool_run_result(const Json& result) {
  if (result.contains("idempotency_key")) {  // a json tool's call: its result, and how it was keyed
    Json out = text_result(result["result"].dump(2, ' ', false, Json::error_handler_t::replace) +
                               fmt::format("\n--- step {}, idempotency key {}", result.value("step", Json(0)).dump(),
                                           result.value("idempotency_key", "")),
                           false);
    out["structuredContent"] = result;
    return out;
  }
  const Json& o = result.value("outcome", Json::object());
  std::string text;
  for (const char* key : {"stdout", "stderr"}) {
    std::string bytes = result.value(key, std::string());
    bool encoded = result.contains(std::string(key) + "_base64");
    if (bytes.empty() && !encoded) continue;
    text += fmt::format("--- {}{}\n", key, encoded ? " (not UTF-8: base64 in structuredContent)" : "");
    text += bytes;
    if (!bytes.empty() && bytes.back() != '\n') text += "\n";
  }
  bool failed = o.value("status", 0) != 0;
  std::string ended = o.value("timed_out", false) ? "timed out"
                      : o.contains("signal") && o["signal"].is_number()
                          ? fmt::format("killed by signal {}", o["signal"].get<int>())
                          : fmt::format("exit {}", o.value("status", 0));
  text += fmt::format("--- {} in {} ms", ended, o.value("wall_ms", Json(0)).dump());
  Json out = text_result(std::move(text), failed);
  out["structuredContent"] = result;
  return out;
}

}  // namespace

Json rpc_error(const Json& id, int code, const std::string& message) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}

std::string explain_refusal(const Error& e, const policy::TaskPolicy& p, const plan::ExecutionPlan& plan) {
  std::string text = fmt::format("airlock {} this action: {}: {}.",
                                 e.code == Code::EgressFailed ? "could not complete" : "refused", to_name(e.code),
                                 e.message);
  std::string instead;
  // What else stands in the way, said only where it is true of this policy on this tier.
  std::string elsewhere;
  bool confined = plan.executor() != policy::ExecutorKind::Host;
  bool policy_refusal = true;
  switch (e.code) {
    case Code::PathDenied: {
      instead = fmt::format("The task policy lets you read and list only {}, and write only {}. These names are "
                            "never accessible at any depth: {}. Paths are workspace-relative, without '..'.",
                            prefixes(p.readable), prefixes(p.write_back_paths), fmt::join(p.denied_names, ", "));
      std::string reason = e.facts.value("reason", std::string());
      if (reason.find("denied name") != std::string::npos || reason.find("outside every readable") != std::string::npos)
        elsewhere = fmt::format(
            "It is not in the sandbox's copy of the workspace either (the {} tier), so a shell command or another "
            "tool cannot read it.",
            policy::to_string(plan.executor()));
      else if (reason.find("protected path") != std::string::npos)
        elsewhere = fmt::format(
            "Protected paths are read-only inside the sandbox (the {} tier), and a change to one made any other "
            "way is refused when the workspace is written back: it never lands.",
            policy::to_string(plan.executor()));
      else if (reason.find("write_back_paths") != std::string::npos)
        elsewhere = "A change outside the write-back paths made any other way is never written back.";
      break;
    }
    case Code::EgressDenied: {
      instead = fmt::format("http_fetch may reach only {}; private and loopback addresses are refused unless a "
                            "rule allows them.",
                            egress_rules(p.egress));
      const auto* ns = std::get_if<plan::NamespacesTierPlan>(&plan.confinement);
      if (confined && !plan.host_network())
        elsewhere = ns && ns->door ? "Commands in the sandbox reach the network only through a door that admits the "
                                     "code_network rules alone."
                                   : "Commands in the sandbox have no network at all.";
      break;
    }
    case Code::ToolNotDeclared:
    case Code::ToolArgsDenied:
      instead = fmt::format("The declared tools are: {}.", tool_list(p.tools));
      break;
    case Code::RateLimited:
      instead = fmt::format("The policy allows {} actions a minute; wait before the next one.",
                            p.limits.max_actions_per_minute);
      break;
    case Code::LimitExceeded:
      instead = "The policy caps what one action may move (see facts); ask for less, e.g. a range with offset "
                "and length.";
      break;
    case Code::BypassRefused:
      break;
    case Code::ApprovalDenied:
      policy_refusal = false;
      instead = "A person denied exactly this call: it will not run with these arguments. Do not try it another "
                "way; ask the user what they want instead.";
      break;
    case Code::ApprovalRequired:
      policy_refusal = false;
      instead = "A person must approve exactly this call first: ask the user to approve the request named above "
                "(`airlock approve ID`), then call again with the same arguments. Other arguments are not covered "
                "by the approval.";
      break;
    // Not the policy: the session, the host, the caller or airlock itself. Listed, not defaulted,
    // so a new code is a compile error here until someone says which it is.
    case Code::PolicyInvalid:
    case Code::PolicyUntrusted:
    case Code::IsolationPolicyInvalid:
    case Code::ExecutorUnavailable:
    case Code::ConfinementBelowFloor:
    case Code::SessionKilled:
    case Code::SessionClosed:
    case Code::BudgetExhausted:
    case Code::ToolTimeout:
    case Code::OutputLimit:
    case Code::ToolFailed:
    case Code::ProtocolError:
    case Code::LedgerCorrupt:
    case Code::LedgerWriteFailed:
    case Code::KeyDerivationUnknown:
    case Code::CapacityExhausted:
    case Code::ConfigError:
    case Code::Unauthorized:
    case Code::CustodyUnsafe:
    case Code::WriteBackRefused:
    case Code::NotFound:
    case Code::StoreSchemaNewer:
    case Code::SessionUnknown:
    case Code::RequestTooLarge:
    case Code::RequestHeadTooLarge:
    case Code::RequestTimeout:
    case Code::IoError:
    case Code::OptionInvalid:
    case Code::ServerUnreachable:
    case Code::InternalError:
    case Code::RunInUse:
      policy_refusal = false;
      break;
    case Code::EgressFailed:
      policy_refusal = false;
      instead = "The policy allows this destination; it could not be reached (it may be down or not resolve). "
                "Trying again later may work.";
      break;
  }
  if (!instead.empty()) text += " " + instead;
  if (!elsewhere.empty()) text += " " + elsewhere;
  if (policy_refusal)
    text += " This is the task's policy: do not try to work around it; if the task needs more, tell the user what "
            "and why.";
  if (e.code == Code::SessionKilled || e.code == Code::SessionClosed || e.code == Code::BudgetExhausted)
    text += " The session has ended: no further action will be accepted.";
  if (!e.facts.empty()) text += " Facts: " + e.facts.dump(-1, ' ', false, Json::error_handler_t::replace);
  return text;
}

std::string explain_unavailable(const Error& e) {
  std::string text = fmt::format(
      "airlock could not start this session, so no action can run: {}: {}. Nothing was read, written or run. "
      "The operator must fix the policy or the host and restart the MCP server; tell the user this reason.",
      to_name(e.code), e.message);
  if (!e.facts.empty()) text += " Facts: " + e.facts.dump(-1, ' ', false, Json::error_handler_t::replace);
  return text;
}

std::string McpServer::declared_name(const policy::Tool& t) const {
  for (auto b : kBuiltins)
    if (t.name == b) return "run_" + t.name;
  return t.name;
}

Json McpServer::tools() const {
  Json path = {{"type", "string"}, {"description", "workspace-relative path"}};
  Json list = Json::array();
  if (unavailable_) {
    // The built-in tools, each saying why it cannot run: a model that calls one reads the reason.
    std::string why = fmt::format("Unavailable: {}", explain_unavailable(*unavailable_));
    for (auto b : kBuiltins)
      list.push_back({{"name", b}, {"description", why}, {"inputSchema", {{"type", "object"}}}});
    return {{"tools", list}};
  }
  bool code_online = policy_.code_network.mode != policy::NetworkMode::Off;
  list.push_back({{"name", "read_file"},
                  {"title", "Read a workspace file"},
                  {"annotations", hints(true, false, true, false)},
                  {"description", fmt::format("Read a file in the task's workspace. Readable: {}.", prefixes(policy_.readable))},
                  {"inputSchema", object_schema({{"path", path},
                                                 {"offset", {{"type", "integer"}, {"minimum", 0}}},
                                                 {"length", {{"type", "integer"}, {"minimum", 0}}}},
                                                {"path"})}});
  list.push_back({{"name", "write_file"},
                  {"title", "Write a workspace file"},
                  {"annotations", hints(false, true, true, false)},
                  {"description",
                   fmt::format("Write a whole file in the task's workspace ({}). Writable: {}.",
                               policy_.write_back == policy::WriteBack::Immediate
                                   ? "it lands in the workspace as soon as it is written"
                                   : "it lands in the workspace when the session ends normally",
                               prefixes(policy_.write_back_paths))},
                  {"inputSchema", object_schema({{"path", path}, {"content", {{"type", "string"}}}}, {"path", "content"})}});
  list.push_back({{"name", "list_dir"},
                  {"title", "List a workspace directory"},
                  {"annotations", hints(true, false, true, false)},
                  {"description", "List a directory in the task's workspace."},
                  {"inputSchema", object_schema({{"path", path}})}});
  list.push_back(
      {{"name", "http_fetch"},
       {"title", "Fetch a URL"},
       {"annotations", hints(false, true, false, true)},  // POST, PUT and DELETE are offered
       {"description", fmt::format("Fetch a URL. Allowed destinations: {}. Redirects are returned, not followed.",
                                   egress_rules(policy_.egress))},
       {"inputSchema", object_schema({{"url", {{"type", "string"}}},
                                      {"method", {{"type", "string"}, {"enum", {"GET", "HEAD", "POST", "PUT", "PATCH",
                                                                                "DELETE", "OPTIONS"}}}},
                                      {"headers", {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}}},
                                      {"body", {{"type", "string"}}}},
                                     {"url"})}});
  for (const auto& t : policy_.tools) {
    Json props = Json::object();
    if (t.protocol == policy::ToolProtocol::Json) {
      props["args"] = {{"type", "object"},
                       {"description", "the tool's arguments, sent to it as one JSON object with its idempotency key"}};
      props["step"] = {{"type", "integer"}, {"minimum", 0},
                       {"description", "the call's step in the run (default: the next); the same step, tool and "
                                       "arguments carry the same idempotency key, so a retry is recognised"}};
      list.push_back({{"name", declared_name(t)},
                      {"title", fmt::format("Call {}", t.name)},
                      // A json tool exists for its effect on the world outside the sandbox.
                      {"annotations", hints(false, true, false, true)},
                      {"description", fmt::format("Call the declared tool \"{}\" ({}); every call is recorded in "
                                                  "the run's effect ledger before and after it runs (timeout {} s).",
                                                  t.name, fmt::join(t.argv, " "), t.timeout_seconds)},
                      {"inputSchema", object_schema(props)}});
      continue;
    }
    if (t.allow_args) props["args"] = {{"type", "array"}, {"items", {{"type", "string"}}},
                                       {"description", "extra arguments, each one argv entry (no shell)"}};
    list.push_back({{"name", declared_name(t)},
                    {"title", fmt::format("Run {}", t.name)},
                    // A declared program may change the workspace; the open world only through
                    // the network the policy gives commands.
                    {"annotations", hints(false, true, false, code_online)},
                    {"description", fmt::format("Run the declared tool \"{}\": {}{} (timeout {} s).", t.name,
                                                fmt::join(t.argv, " "), t.allow_args ? " [args]" : "",
                                                t.timeout_seconds)},
                    {"inputSchema", object_schema(props)}});
  }
  return {{"tools", list}};
}

Json McpServer::call_tool(const Json& params, int& rpc_code, std::string& rpc_message) {
  if (!params.is_object() || !params.contains("name") || !params["name"].is_string()) {
    rpc_code = kInvalidParams;
    rpc_message = "tools/call needs params.name (a string)";
    return nullptr;
  }
  std::string name = params["name"];
  Json args = params.value("arguments", Json::object());
  if (args.is_null()) args = Json::object();
  if (unavailable_) return text_result(explain_unavailable(*unavailable_), true);
  Json request;
  if (std::find(std::begin(kBuiltins), std::end(kBuiltins), name) != std::end(kBuiltins)) {
    request = {{"action", name}};
  } else {
    auto t = std::find_if(policy_.tools.begin(), policy_.tools.end(),
                          [&](const policy::Tool& x) { return declared_name(x) == name; });
    if (t == policy_.tools.end()) {
      rpc_code = kInvalidParams;
      rpc_message = fmt::format("unknown tool \"{}\" (tools/list names them)", name);
      return nullptr;
    }
    request = {{"action", "run_tool"}, {"tool", t->name}};
  }
  if (!args.is_object())
    return text_result(explain_refusal(Error{Code::ProtocolError, "arguments must be an object"}, policy_, s_->plan()), true);
  for (const auto& [k, v] : args.items()) {
    if (request.contains(k) || k == "id") {  // the tool's name decides the action, never an argument
      Error e{Code::ProtocolError, fmt::format("\"{}\" is not an argument of {}", k, name), {{"path", "$." + k}}};
      (void)s_->note_refusal("protocol.refused", args, e);
      return text_result(explain_refusal(e, policy_, s_->plan()), true);
    }
    request[k] = v;
  }
  Json resp = broker::handle_request(*s_, request);
  if (!resp["ok"].get<bool>()) {
    Error e = answer_error(resp["error"]);
    if (e.code == Code::ApprovalRequired && client_elicits_ && client_request_)
      if (auto answered = elicit_approval(request, e)) return *answered;
    return text_result(explain_refusal(e, policy_, s_->plan()), true);
  }
  const Json& result = resp["result"];
  if (request["action"] == "run_tool") return tool_run_result(result);
  std::string text = name == "read_file" && result.contains("content")
                         ? result["content"].get<std::string>()
                         : result.dump(2, ' ', false, Json::error_handler_t::replace);
  Json out = text_result(std::move(text), false);
  out["structuredContent"] = result;
  return out;
}

std::optional<Json> McpServer::elicit_approval(const Json& request, const Error& held) {
  std::string id = held.facts.value("approval_id", "");
  Json args = request.value("args", Json::object());
  std::string message = fmt::format(
      "airlock: the agent asks to call the tool \"{}\" in run {} with these arguments:\n{}\nIt runs only if you "
      "approve exactly this call (approval request {}).",
      request.value("tool", ""), held.facts.value("run_id", ""),
      args.dump(2, ' ', true, Json::error_handler_t::replace), id);
  Json params = {{"message", message},
                 {"requestedSchema",
                  {{"type", "object"},
                   {"properties",
                    {{"approve",
                      {{"type", "boolean"},
                       {"title", "Approve this call"},
                       {"description", "Run this tool once with exactly these arguments"}}}}},
                   {"required", {"approve"}}}}};
  auto answer = client_request_("elicitation/create", params);
  if (!answer || !answer->is_object()) return std::nullopt;  // no answer: the call stays held
  std::string action = answer->value("action", "");
  const Json content = answer->value("content", Json::object());
  bool approve = action == "accept" && content.is_object() && content.value("approve", Json(false)) == Json(true);
  bool deny = action == "decline" || (action == "accept" && !approve);
  if (!approve && !deny) return std::nullopt;  // cancelled: still held, for another channel to answer
  broker::ApprovalStore store(s_->state_dir());
  auto decided = store.decide(id, approve, 1, broker::kApprovalTtlMs,
                              "mcp elicitation (the client's user, as the client says)");
  if (!decided) return text_result(explain_refusal(held, policy_, s_->plan()), true);
  if (deny)
    return text_result(fmt::format("The user denied this call (approval request {}): it was not run and will not be "
                                   "run with these arguments. Do not try it another way; ask the user what they want "
                                   "instead.",
                                   id),
                       true);
  Json resp = broker::handle_request(*s_, request);
  if (!resp["ok"].get<bool>()) return text_result(explain_refusal(answer_error(resp["error"]), policy_, s_->plan()), true);
  return tool_run_result(resp["result"]);
}

Json McpServer::handle_one(const Json& m, bool& answered) {
  answered = true;
  Json id = m.is_object() && m.contains("id") ? m["id"] : Json(nullptr);
  if (!m.is_object() || m.value("jsonrpc", "") != "2.0")
    return rpc_error(id, kInvalidRequest, "not a JSON-RPC 2.0 message");
  if (!m.contains("method") || !m["method"].is_string()) {
    answered = false;  // a response to something we never ask: nothing to say
    return nullptr;
  }
  std::string method = m["method"];
  if (!m.contains("id")) {  // notifications (initialized, cancelled, …) get no answer
    answered = false;
    return nullptr;
  }
  Json params = m.value("params", Json::object());
  auto ok = [&](Json result) { return Json{{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}}; };
  if (method == "initialize") {
    std::string asked = params.is_object() ? params.value("protocolVersion", "") : "";
    client_elicits_ = params.is_object() && params.contains("capabilities") && params["capabilities"].is_object() &&
                      params["capabilities"].contains("elicitation");
    std::string_view revision = kMcpRevisions[0];
    for (auto r : kMcpRevisions)
      if (asked == r) revision = r;
    std::string instructions =
        unavailable_ ? explain_unavailable(*unavailable_)
                     : "Every tool acts through an airlock session under the task's policy; each call is checked, "
                       "recorded, and refused with a reason when the policy does not allow it.";
    return ok({{"protocolVersion", revision},
               {"capabilities", {{"tools", {{"listChanged", false}}}}},
               {"serverInfo", {{"name", "airlock"}, {"version", "0.1.0"}}},
               {"instructions", instructions}});
  }
  if (method == "ping") return ok(Json::object());
  if (method == "tools/list") return ok(tools());
  if (method == "tools/call") {
    int code = 0;
    std::string message;
    Json r = call_tool(params, code, message);
    if (code != 0) return rpc_error(id, code, message);
    return ok(std::move(r));
  }
  return rpc_error(id, kMethodNotFound, fmt::format("method \"{}\" is not served here", method));
}

std::optional<Json> McpServer::handle(const Json& message) {
  try {  // nothing thrown crosses the adapter (STYLE.md rule 4)
    bool answered = false;
    if (message.is_array()) {  // a batch (revision 2025-03-26)
      Json out = Json::array();
      for (const auto& m : message) {
        Json r = handle_one(m, answered);
        if (answered) out.push_back(std::move(r));
      }
      if (message.empty()) return rpc_error(nullptr, kInvalidRequest, "an empty batch");
      if (out.empty()) return std::nullopt;
      return out;
    }
    Json r = handle_one(message, answered);
    if (!answered) return std::nullopt;
    return r;
  } catch (const std::exception& ex) {
    Json id = message.is_object() && message.contains("id") ? message["id"] : Json(nullptr);
    return rpc_error(id, kInvalidRequest, fmt::format("the message could not be handled: {}", ex.what()));
  }
}

}  // namespace airlock::server
