// approval_replayed_twice: have one dispatch approved, then dispatch the same call twice.
#include "broker/attack.h"

namespace airlock::broker::attacks::approval_replayed_twice {

Result<AttackResult> run(AttackContext& c) {
  TRY(c.ask_and_approve(c.session, {{"to", "cy"}, {"amount", 9}}));
  auto first = c.pay(c.session, {{"to", "cy"}, {"amount", 9}});
  if (!first) return fail(Code::InternalError, "the approved call did not run: " + first.error().message);
  return AttackContext::must_hold(c.pay(c.session, {{"to", "cy"}, {"amount", 9}}),
                                  "the program ran a second time: nothing counts");
}

}  // namespace airlock::broker::attacks::approval_replayed_twice
