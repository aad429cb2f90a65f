// denied_name: read .env, a name the policy denies wherever it is.
#include "broker/attack.h"

namespace airlock::broker::attacks::denied_name {

Result<AttackResult> run(AttackContext& c) {
  const std::string denied(to_name(Code::PathDenied));
  auto r = c.session.read_file(".env");
  // The baseline is a process in the workspace itself: the view never holds a denied name.
  std::string b = plain_read(c.ws + "/.env");
  return AttackResult{.expected = denied,
                      .broker = answer(r),
                      .contained = answer(r) == denied,
                      .baseline_breached = c.leaks(b),
                      .detail = why(r),
                      .baseline_detail = "open(2) read .env in the workspace"};
}

}  // namespace airlock::broker::attacks::denied_name
