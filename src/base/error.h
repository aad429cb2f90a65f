// Errors as values: the one table of AIRLOCK_ codes, Error{code, message, facts} and Result<T>.
#pragma once

#include <expected>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace airlock {

// The stable refusal codes. A name is never reused or renumbered; add new ones at
// the end. Columns: enumerator, stable name, one-line meaning.
#define AIRLOCK_CODES(X)                                                                   \
  X(PolicyInvalid, "AIRLOCK_POLICY_INVALID", "the task policy is malformed or unknown")    \
  X(IsolationPolicyInvalid, "AIRLOCK_ISOLATION_POLICY_INVALID",                             \
    "the policy asks for less isolation than its workload needs")                          \
  X(ExecutorUnavailable, "AIRLOCK_EXECUTOR_UNAVAILABLE",                                    \
    "no executor the policy allows can run on this host")                                  \
  X(ConfinementBelowFloor, "AIRLOCK_CONFINEMENT_BELOW_FLOOR",                               \
    "the kernel offers less confinement than the tier's floor")                            \
  X(PathDenied, "AIRLOCK_PATH_DENIED", "the path is outside what the policy allows")        \
  X(EgressDenied, "AIRLOCK_EGRESS_DENIED", "the destination is not on the allow-list")      \
  X(ToolNotDeclared, "AIRLOCK_TOOL_NOT_DECLARED", "the tool is not declared by the policy")  \
  X(ToolArgsDenied, "AIRLOCK_TOOL_ARGS_DENIED", "the tool does not accept these arguments") \
  X(BypassRefused, "AIRLOCK_BYPASS_REFUSED", "the command asks to switch a safety off")     \
  X(LimitExceeded, "AIRLOCK_LIMIT_EXCEEDED", "a resource limit was exceeded")               \
  X(RateLimited, "AIRLOCK_RATE_LIMITED", "too many actions in the last minute")             \
  X(SessionKilled, "AIRLOCK_SESSION_KILLED", "the session was killed")                      \
  X(SessionClosed, "AIRLOCK_SESSION_CLOSED", "the session is closed")                       \
  X(BudgetExhausted, "AIRLOCK_BUDGET_EXHAUSTED", "the session's time budget ran out")       \
  X(ToolTimeout, "AIRLOCK_TOOL_TIMEOUT", "the command ran past its wall-time limit")        \
  X(OutputLimit, "AIRLOCK_OUTPUT_LIMIT", "the command wrote more output than allowed")      \
  X(ToolFailed, "AIRLOCK_TOOL_FAILED", "the tool failed")                                   \
  X(ProtocolError, "AIRLOCK_PROTOCOL_ERROR", "the peer broke the protocol")                 \
  X(LedgerCorrupt, "AIRLOCK_LEDGER_CORRUPT", "the ledger cannot be read as written")        \
  X(LedgerWriteFailed, "AIRLOCK_LEDGER_WRITE_FAILED", "a ledger or receipt write failed")   \
  X(KeyDerivationUnknown, "AIRLOCK_KEY_DERIVATION_UNKNOWN",                                 \
    "the recorded key derivation version is unknown to this build")                        \
  X(CapacityExhausted, "AIRLOCK_CAPACITY_EXHAUSTED", "the slot carries all it may")         \
  X(ConfigError, "AIRLOCK_CONFIG_ERROR", "airlock's configuration (a file, a URL, the host) is unusable") \
  X(Unauthorized, "AIRLOCK_UNAUTHORIZED", "the request carries no valid credentials")       \
  X(CustodyUnsafe, "AIRLOCK_CUSTODY_UNSAFE", "a file airlock trusts could be replaced")     \
  X(ApprovalRequired, "AIRLOCK_APPROVAL_REQUIRED", "the action needs a person's approval")  \
  X(WriteBackRefused, "AIRLOCK_WRITE_BACK_REFUSED",                                         \
    "the session view holds an entry write-back refuses")                                  \
  X(NotFound, "AIRLOCK_NOT_FOUND", "the path or tool named does not exist")                \
  X(StoreSchemaNewer, "AIRLOCK_STORE_SCHEMA_NEWER",                                         \
    "the run store's schema is newer than this build knows")                                \
  X(SessionUnknown, "AIRLOCK_SESSION_UNKNOWN", "no session has this id")                  \
  X(RequestTooLarge, "AIRLOCK_REQUEST_TOO_LARGE", "the request body is larger than allowed") \
  X(RequestHeadTooLarge, "AIRLOCK_REQUEST_HEAD_TOO_LARGE",                                  \
    "the request line or headers are larger than allowed")                                  \
  X(RequestTimeout, "AIRLOCK_REQUEST_TIMEOUT", "the request did not arrive in the time allowed") \
  X(IoError, "AIRLOCK_IO_ERROR", "a file, directory or system call airlock needed failed (see errno)") \
  X(OptionInvalid, "AIRLOCK_OPTION_INVALID", "an option or argument given to airlock is malformed")     \
  X(ServerUnreachable, "AIRLOCK_SERVER_UNREACHABLE", "no server answers at the address given")       \
  X(InternalError, "AIRLOCK_INTERNAL_ERROR", "airlock broke one of its own rules: a bug to report") \
  X(EgressFailed, "AIRLOCK_EGRESS_FAILED",                                                  \
    "the destination is allowed but could not be reached (see the address and errno)")       \
  X(PolicyUntrusted, "AIRLOCK_POLICY_UNTRUSTED",                                            \
    "a policy found in the repository allows more than yours and was not allowed by you")     \
  X(RunInUse, "AIRLOCK_RUN_IN_USE", "another session holds this run's ledger")                \
  X(ApprovalDenied, "AIRLOCK_APPROVAL_DENIED", "a person denied this exact call")

enum class Code {
#define AIRLOCK_X(e, name, meaning) e,
  AIRLOCK_CODES(AIRLOCK_X)
#undef AIRLOCK_X
};

// The stable name, e.g. "AIRLOCK_POLICY_INVALID". Exhaustive switch: -Werror=switch.
std::string_view to_name(Code code);
std::string_view meaning(Code code);
std::optional<Code> code_from_name(std::string_view name);
// Every code in table order (for docs and tests).
std::span<const Code> all_codes();

struct Error {
  Code code;
  std::string message;
  nlohmann::json facts = nlohmann::json::object();

  // Adds context as the error rises: "while X: <message>".
  Error& context(std::string_view what) &;
  Error&& context(std::string_view what) &&;
  Error&& fact(std::string key, nlohmann::json value) &&;
  nlohmann::json to_json() const;
  static std::optional<Error> from_json(const nlohmann::json& j);
};

template <typename T>
using Result = std::expected<T, Error>;

inline std::unexpected<Error> fail(Code code, std::string message,
                                   nlohmann::json facts = nlohmann::json::object()) {
  return std::unexpected(Error{code, std::move(message), std::move(facts)});
}

// fail() with an errno rendered into the message and facts.
std::unexpected<Error> fail_errno(Code code, std::string what, int err);

}  // namespace airlock

// Propagate an error in one token: auto x = TRY(f());
#define AIRLOCK_TRY(expr)                                              \
  ({                                                                   \
    auto&& airlock_try_result_ = (expr);                               \
    if (!airlock_try_result_) return std::unexpected(std::move(airlock_try_result_).error()); \
    std::move(airlock_try_result_).value();                            \
  })
#define TRY(expr) AIRLOCK_TRY(expr)
