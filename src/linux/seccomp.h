// seccomp: compile the plan's filter to BPF in the parent (libseccomp), install it in the child.
#pragma once

#include <linux/filter.h>

#include <vector>

#include "base/error.h"
#include "plan/plan.h"

namespace airlock::linux {

struct PreparedSeccomp {
  std::vector<sock_filter> program;
  sock_fprog fprog{};  // points into program; valid while this object lives and is not moved
  Json applied;        // what the filter denies, for the receipt
};

// Parent side. An unknown syscall name is an error, never skipped silently.
Result<std::unique_ptr<PreparedSeccomp>> prepare_seccomp(const plan::SeccompPlan& plan);

// Child side, after no_new_privs and Landlock: returns 0 or an errno. Allocation-free.
int apply_seccomp(const sock_fprog* prog) noexcept;

}  // namespace airlock::linux
