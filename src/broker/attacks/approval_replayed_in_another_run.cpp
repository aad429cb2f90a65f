// approval_replayed_in_another_run: have a call approved in one run, then make the same call in
// another run (another session, another run id).
#include "broker/attack.h"

namespace airlock::broker::attacks::approval_replayed_in_another_run {

Result<AttackResult> run(AttackContext& c) {
  const std::string code(to_name(Code::ApprovalRequired));
  auto asked = c.pay(c.session, {{"to", "bob"}, {"amount", 7}});
  if (!asked && asked.error().code == Code::ApprovalRequired)
    TRY(c.approve(asked.error().facts.value("approval_id", "")));
  auto other = TRY(c.open_session(60));
  auto r = c.pay(*other, {{"to", "bob"}, {"amount", 7}});
  std::string b = AttackContext::plain_pay();
  return AttackResult{.expected = code,
                      .broker = answer(r),
                      .contained = answer(r) == code,
                      .baseline_breached = b.find("paid") != std::string::npos,
                      .detail = why(r),
                      .baseline_detail = "the program ran in the other run: nothing asks"};
}

}  // namespace airlock::broker::attacks::approval_replayed_in_another_run
