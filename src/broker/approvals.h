// Approvals: a call to a tool that declares "approval": "required" is held until a person
// approves exactly that call. An approval is bound to (run, tool, sha256 of the canonical
// arguments): another argument, tool or run is not covered. It covers a number of dispatches
// (one unless the approver says more), each taken when a dispatch starts; it can expire; it can
// be denied. The store is files under STATE/approvals/, one per request (ID.json), each change
// made under STATE/approvals/.lock (flock), so the session that asks (any process) and the person
// who answers (`airlock approve`, the server's /v1/approvals) meet there. Each answer is also a
// receipt of its own under STATE/approvals/receipts/. A channel is not a verified principal:
// who may approve is the access control around the state directory and the operator's token.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json_util.h"

namespace airlock::broker {

// The call an approval covers.
struct ApprovalBinding {
  std::string run_id, tool, args_sha256;
  std::string tool_sha256;  // of the tool's definition (policy::to_json): an approval of one program is not another's
  bool operator==(const ApprovalBinding&) const = default;
};

struct Approval {
  std::string id;
  ApprovalBinding binding;
  std::string session;  // the session that asked
  Json args;            // the arguments, for the person deciding (never in a receipt: args_sha256 is)
  Json tool_definition;  // argv, env, protocol, …: what runs, for the person deciding
  // pending -> approved -> used (every attempt taken) | denied | expired
  std::string status = "pending";
  int64_t requested_at = 0, expires_at = 0;  // ms since the epoch
  uint32_t attempts = 1;                     // dispatches an approval covers
  uint32_t used = 0;
  Json answered = nullptr;  // {"decision", "channel", "at"}: who answered, as honestly as the channel can say
  // `with_args`: the arguments themselves too (the store and the person's listing); receipts
  // carry only their digest, as the ledger does.
  Json to_json(bool with_args = true) const;
  static Result<Approval> from_json(const Json& j);
};

// How long a request waits for an answer, and how long an approval stays good, unless the
// approver says otherwise.
inline constexpr int64_t kApprovalTtlMs = 3600 * 1000;
// The longest an approver may make an approval last.
inline constexpr int64_t kMaxApprovalTtlMs = int64_t{366} * 86400 * 1000;

class ApprovalStore {
 public:
  explicit ApprovalStore(std::string state_dir);

  struct Check {
    std::optional<Approval> approved;  // the approval one attempt of which this dispatch took
    std::optional<Approval> request;   // else: the pending request for this call
    std::optional<Approval> denied;    // else: a person denied this call (until its request expires)
    bool created = false;              // the request was made now
    std::vector<Approval> expired;     // requests and approvals for this call found expired now
  };
  // The session's side, for one call about to dispatch: takes one attempt of an approval that
  // covers it (status "used" once none is left), else returns the call's pending request,
  // making one when there is none — unless a person denied this call, which holds until its
  // request's expiry. Every request or approval for this binding past its expiry is marked
  // expired on the way (and returned, to be recorded).
  Result<Check> take_or_request(const ApprovalBinding& b, const std::string& session, const Json& args,
                                const Json& tool_definition);

  // The person's side: approves (covering `attempts` dispatches, good for `ttl_ms` from now) or
  // denies a pending request; `channel` says how the answer came ("cli uid 0", "http operator
  // token"). Unknown id: AIRLOCK_NOT_FOUND; not pending (answered, expired), or `ttl_ms` not
  // from 1 s to kMaxApprovalTtlMs: AIRLOCK_OPTION_INVALID.
  // The answer is also written as a receipt (STATE/approvals/receipts/ID-DECISION.jsonl), as is
  // each expiry seen (ID-expired.jsonl).
  Result<Approval> decide(const std::string& id, bool approve, uint32_t attempts, int64_t ttl_ms,
                          const std::string& channel);

  // Every request, newest first; `pending_only` keeps the pending ones. Those past their expiry
  // are marked expired and recorded on the way.
  Result<std::vector<Approval>> list(bool pending_only);

 private:
  std::string dir_;
};

// An approval id is what random_id makes: 32 lower-case hex digits. Anything else names no file.
bool valid_approval_id(std::string_view id);

}  // namespace airlock::broker
