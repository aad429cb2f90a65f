// forged_approval_id: approve an id no request was given (as if a call were approved), then call.
#include "base/hash.h"
#include "broker/approvals.h"
#include "broker/attack.h"

namespace airlock::broker::attacks::forged_approval_id {

Result<AttackResult> run(AttackContext& c) {
  const std::string code(to_name(Code::ApprovalRequired));
  auto forged = ApprovalStore(c.state).decide(random_id(), true, 1, kApprovalTtlMs, "broker suite");
  if (forged) return fail(Code::InternalError, "an approval id no request was given was approved");
  auto r = c.pay(c.session, {{"to", "dee"}, {"amount", 3}});
  std::string b = AttackContext::plain_pay();
  return AttackResult{.expected = code,
                      .broker = answer(r),
                      .contained = answer(r) == code,
                      .baseline_breached = b.find("paid") != std::string::npos,
                      .detail = why(r),
                      .baseline_detail = "the program ran: nothing asks for an approval"};
}

}  // namespace airlock::broker::attacks::forged_approval_id
