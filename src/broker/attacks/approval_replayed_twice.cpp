// approval_replayed_twice: have one dispatch approved, then dispatch the same call twice.
#include "broker/attack.h"

namespace airlock::broker::attacks::approval_replayed_twice {

Result<AttackResult> run(AttackContext& c) {
  const std::string code(to_name(Code::ApprovalRequired));
  auto asked = c.pay(c.session, {{"to", "cy"}, {"amount", 9}});
  if (!asked && asked.error().code == Code::ApprovalRequired)
    TRY(c.approve(asked.error().facts.value("approval_id", "")));
  auto first = c.pay(c.session, {{"to", "cy"}, {"amount", 9}});
  if (!first) return fail(Code::InternalError, "the approved call did not run: " + first.error().message);
  auto r = c.pay(c.session, {{"to", "cy"}, {"amount", 9}});
  std::string b = AttackContext::plain_pay();
  return AttackResult{.expected = code,
                      .broker = answer(r),
                      .contained = answer(r) == code,
                      .baseline_breached = b.find("paid") != std::string::npos,
                      .detail = why(r),
                      .baseline_detail = "the program ran a second time: nothing counts"};
}

}  // namespace airlock::broker::attacks::approval_replayed_twice
