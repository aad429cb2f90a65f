// forged_approval_id: approve an id no request was given (as if a call were approved), then call.
#include "base/hash.h"
#include "broker/approvals.h"
#include "broker/attack.h"

namespace airlock::broker::attacks::forged_approval_id {

Result<AttackResult> run(AttackContext& c) {
  if (ApprovalStore(c.state).decide(random_id(), true, 1, kApprovalTtlMs, "broker suite"))
    return fail(Code::InternalError, "an approval id no request was given was approved");
  return AttackContext::must_hold(c.pay(c.session, {{"to", "dee"}, {"amount", 3}}),
                                  "the program ran: nothing asks for an approval");
}

}  // namespace airlock::broker::attacks::forged_approval_id
