// absolute_path: read a file outside the workspace by its absolute path.
#include "broker/attack.h"

namespace airlock::broker::attacks::absolute_path {

Result<AttackResult> run(AttackContext& c) {
  const std::string denied(to_name(Code::PathDenied));
  auto r = c.session.read_file(c.secret);
  std::string b = plain_read(c.secret);
  return AttackResult{.expected = denied,
                      .broker = answer(r),
                      .contained = answer(r) == denied,
                      .baseline_breached = c.leaks(b),
                      .detail = why(r),
                      .baseline_detail = "open(2) read the secret"};
}

}  // namespace airlock::broker::attacks::absolute_path
