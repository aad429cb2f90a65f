// approval_replayed_in_another_run: have a call approved in one run, then make the same call in
// another run (another session, another run id).
#include "broker/attack.h"

namespace airlock::broker::attacks::approval_replayed_in_another_run {

Result<AttackResult> run(AttackContext& c) {
  TRY(c.ask_and_approve(c.session, {{"to", "bob"}, {"amount", 7}}));
  auto other = TRY(c.open_session(60));
  return AttackContext::must_hold(c.pay(*other, {{"to", "bob"}, {"amount", 7}}),
                                  "the program ran in the other run: nothing asks");
}

}  // namespace airlock::broker::attacks::approval_replayed_in_another_run
