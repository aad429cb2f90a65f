// hard_link_outside: read the secret through a hard link to it in the view.
#include <unistd.h>

#include "broker/attack.h"

namespace airlock::broker::attacks::hard_link_outside {

Result<AttackResult> run(AttackContext& c) {
  const std::string denied(to_name(Code::PathDenied));
  (void)::link(c.secret.c_str(), (c.view + "/hard.txt").c_str());
  auto r = c.session.read_file("hard.txt");
  std::string b = plain_read(c.view + "/hard.txt");
  return AttackResult{.expected = denied,
                      .broker = answer(r),
                      .contained = answer(r) == denied,
                      .baseline_breached = c.leaks(b),
                      .detail = why(r),
                      .baseline_detail = "open(2) read the secret through the hard link"};
}

}  // namespace airlock::broker::attacks::hard_link_outside
