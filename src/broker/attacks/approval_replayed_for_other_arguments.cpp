// approval_replayed_for_other_arguments: have one call approved, then make another with an argument
// changed under the same approval.
#include "broker/attack.h"

namespace airlock::broker::attacks::approval_replayed_for_other_arguments {

Result<AttackResult> run(AttackContext& c) {
  TRY(c.ask_and_approve(c.session, {{"to", "ann"}, {"amount", 5}}));
  return AttackContext::must_hold(c.pay(c.session, {{"to", "ann"}, {"amount", 5000}}),
                                  "the program ran with the changed amount: nothing asks");
}

}  // namespace airlock::broker::attacks::approval_replayed_for_other_arguments
