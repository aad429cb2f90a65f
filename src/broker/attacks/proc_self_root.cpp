// proc_self_root: read the secret through /proc/self/root.
#include "broker/attack.h"

namespace airlock::broker::attacks::proc_self_root {

Result<AttackResult> run(AttackContext& c) {
  const std::string denied(to_name(Code::PathDenied));
  auto r = c.session.read_file("/proc/self/root" + c.secret);
  std::string b = plain_read("/proc/self/root" + c.secret);
  return AttackResult{.expected = denied,
                      .broker = answer(r),
                      .contained = answer(r) == denied,
                      .baseline_breached = c.leaks(b),
                      .detail = why(r),
                      .baseline_detail = "open(2) read the secret through /proc/self/root"};
}

}  // namespace airlock::broker::attacks::proc_self_root
