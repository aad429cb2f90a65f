// write_through_symlink: write through a symlink in out/ (the write-back path) to a file outside.
#include <unistd.h>

#include <fstream>

#include "broker/attack.h"

namespace airlock::broker::attacks::write_through_symlink {

Result<AttackResult> run(AttackContext& c) {
  const std::string denied(to_name(Code::PathDenied));
  (void)::symlink(c.target.c_str(), (c.view + "/out/link.txt").c_str());
  auto r = c.session.write_file("out/link.txt", "overwritten\n");
  bool intact = plain_read(c.target) == "original\n";
  { std::ofstream(c.view + "/out/link.txt") << "overwritten\n"; }
  bool breached = plain_read(c.target) == "overwritten\n";
  return AttackResult{
      .expected = denied,
      .broker = answer(r),
      .contained = answer(r) == denied && intact,
      .baseline_breached = breached,
      .detail = why(r),
      .baseline_detail = "open(2) for writing followed the symlink and overwrote a file outside"};
}

}  // namespace airlock::broker::attacks::write_through_symlink
