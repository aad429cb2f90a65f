// dot_dot: read a file outside the workspace through .. from the view.
#include <filesystem>

#include "broker/attack.h"

namespace airlock::broker::attacks::dot_dot {

Result<AttackResult> run(AttackContext& c) {
  const std::string denied(to_name(Code::PathDenied));
  std::string rel = std::filesystem::relative(c.secret, c.view).string();
  auto r = c.session.read_file(rel);
  std::string b = plain_read(c.view + "/" + rel);
  return AttackResult{.expected = denied,
                      .broker = answer(r),
                      .contained = answer(r) == denied,
                      .baseline_breached = c.leaks(b),
                      .detail = rel + ": " + why(r),
                      .baseline_detail = "open(2) followed .. out of the view"};
}

}  // namespace airlock::broker::attacks::dot_dot
