// symlink_swapped_during_action: a plain file swapped for a symlink to the secret between the
// broker's check and its open.
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "broker/attack.h"

namespace airlock::broker::attacks::symlink_swapped_during_action {

Result<AttackResult> run(AttackContext& c) {
  const std::string denied(to_name(Code::PathDenied));
  const std::string swap = c.view + "/swap.txt";
  auto make_plain = [&] {
    ::unlink(swap.c_str());
    (void)write_file_atomic(swap, "harmless\n");
  };
  auto swap_in = [&] {
    ::unlink(swap.c_str());
    (void)::symlink(c.secret.c_str(), swap.c_str());
  };
  make_plain();
  // The path guard's seam swaps it in at the worst moment: after the checks, before the open.
  c.session.path_guard().before_open = [&](const std::string& rel) {
    if (rel == "swap.txt") swap_in();
  };
  auto r = c.session.read_file("swap.txt");
  c.session.path_guard().before_open = nullptr;
  // The baseline checks (lstat: a regular file), is raced in the same window, then opens.
  make_plain();
  struct stat st {};
  bool checked = ::lstat(swap.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  swap_in();
  std::string b = checked ? plain_read(swap) : "";
  return AttackResult{
      .expected = denied,
      .broker = answer(r),
      .contained = answer(r) == denied && !c.leaks(r ? r->data : ""),
      .baseline_breached = c.leaks(b),
      .detail = why(r),
      .baseline_detail = "lstat said regular file; open(2) then followed the swapped-in symlink"};
}

}  // namespace airlock::broker::attacks::symlink_swapped_during_action
