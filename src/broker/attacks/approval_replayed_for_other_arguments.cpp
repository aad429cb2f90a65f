// approval_replayed_for_other_arguments: have one call approved, then make another with an argument
// changed under the same approval.
#include "broker/attack.h"

namespace airlock::broker::attacks::approval_replayed_for_other_arguments {

Result<AttackResult> run(AttackContext& c) {
  const std::string code(to_name(Code::ApprovalRequired));
  auto asked = c.pay(c.session, {{"to", "ann"}, {"amount", 5}});
  if (!asked && asked.error().code == Code::ApprovalRequired)
    TRY(c.approve(asked.error().facts.value("approval_id", "")));
  auto r = c.pay(c.session, {{"to", "ann"}, {"amount", 5000}});
  std::string b = AttackContext::plain_pay();
  return AttackResult{.expected = code,
                      .broker = answer(r),
                      .contained = answer(r) == code,
                      .baseline_breached = b.find("paid") != std::string::npos,
                      .detail = why(r),
                      .baseline_detail = "the program ran with the changed amount: nothing asks"};
}

}  // namespace airlock::broker::attacks::approval_replayed_for_other_arguments
