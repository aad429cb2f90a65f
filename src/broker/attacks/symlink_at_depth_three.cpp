// symlink_at_depth_three: read the secret through x/y/z, a symlink three levels down the view.
#include <unistd.h>

#include "base/fs.h"
#include "broker/attack.h"

namespace airlock::broker::attacks::symlink_at_depth_three {

Result<AttackResult> run(AttackContext& c) {
  const std::string denied(to_name(Code::PathDenied));
  TRY(make_dirs(c.view + "/x/y"));
  (void)::symlink(c.outside.c_str(), (c.view + "/x/y/z").c_str());
  auto r = c.session.read_file("x/y/z/secret.txt");
  std::string b = plain_read(c.view + "/x/y/z/secret.txt");
  return AttackResult{.expected = denied,
                      .broker = answer(r),
                      .contained = answer(r) == denied,
                      .baseline_breached = c.leaks(b),
                      .detail = why(r),
                      .baseline_detail = "open(2) followed x/y/z to the secret"};
}

}  // namespace airlock::broker::attacks::symlink_at_depth_three
