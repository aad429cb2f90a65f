// HTTP statuses per refusal code: 4xx for what the caller can change, 5xx for the host.
#include "server/http_status.h"

namespace airlock::server {

int http_status(Code code) {
  switch (code) {
    case Code::ProtocolError:
    case Code::OptionInvalid:
      return 400;  // malformed JSON, unknown or mistyped fields, a malformed argument
    case Code::Unauthorized:
      return 401;
    case Code::PathDenied:
    case Code::EgressDenied:
    case Code::ToolNotDeclared:
    case Code::ToolArgsDenied:
    case Code::BypassRefused:
    case Code::ApprovalRequired:
    case Code::ApprovalDenied:
      return 403;  // the policy refuses; asking again the same way is refused again
    case Code::NotFound:
    case Code::SessionUnknown:
      return 404;
    case Code::SessionKilled:
    case Code::SessionClosed:
    case Code::BudgetExhausted:
    case Code::WriteBackRefused:
    case Code::RunInUse:
      return 409;  // the session's state refuses the action
    case Code::RequestTooLarge:
      return 413;
    case Code::RequestHeadTooLarge:
      return 431;
    case Code::RequestTimeout:
      return 408;
    case Code::PolicyInvalid:
    case Code::PolicyUntrusted:
    case Code::IsolationPolicyInvalid:
    case Code::LimitExceeded:
    case Code::ToolTimeout:
    case Code::OutputLimit:
    case Code::ToolFailed:
      return 422;  // well-formed, but what it asks for cannot be done as asked
    case Code::RateLimited:
      return 429;
    case Code::LedgerCorrupt:
    case Code::LedgerWriteFailed:
    case Code::KeyDerivationUnknown:
    case Code::ConfigError:
    case Code::IoError:
    case Code::InternalError:
    case Code::CustodyUnsafe:
    case Code::StoreSchemaNewer:
      return 500;
    case Code::ExecutorUnavailable:
    case Code::ConfinementBelowFloor:
    case Code::CapacityExhausted:
      return 503;  // this host cannot, now or ever; another host might
    case Code::ServerUnreachable:
    case Code::EgressFailed:
      return 502;  // a server airlock relays to does not answer
  }
  return 500;
}

Error answer_error(const nlohmann::json& error) {
  Error e{Code::ProtocolError, "the broker's answer could not be read", nlohmann::json::object()};
  if (!error.is_object()) return e;
  if (auto c = code_from_name(error.value("code", ""))) e.code = *c;
  if (error.contains("message") && error["message"].is_string()) e.message = error["message"];
  if (error.contains("facts") && error["facts"].is_object()) e.facts = error["facts"];
  return e;
}

}  // namespace airlock::server
