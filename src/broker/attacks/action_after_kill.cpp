// action_after_kill: an action in a session (of its own) the kill switch has ended.
#include "broker/attack.h"

namespace airlock::broker::attacks::action_after_kill {

Result<AttackResult> run(AttackContext& c) {
  const std::string code(to_name(Code::SessionKilled));
  auto k = TRY(c.open_session(60));
  (void)k->kill();
  auto r = k->read_file("ok.txt");
  return AttackResult{.expected = code,
                      .broker = answer(r),
                      .contained = answer(r) == code,
                      .baseline_breached = plain_read(c.ws + "/ok.txt") == "ordinary\n",
                      .detail = why(r),
                      .baseline_detail = "open(2) has no kill switch"};
}

}  // namespace airlock::broker::attacks::action_after_kill
