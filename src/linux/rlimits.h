// rlimits: the plan's per-process limits as a fixed table the child applies without allocating.
#pragma once

#include <sys/resource.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.h"

namespace airlock::linux {

// One limit as set, for the receipt (exec::Enforced).
struct RlimitApplied {
  const char* name;  // "RLIMIT_AS"
  uint64_t soft = 0, hard = 0;
};

struct RlimitSet {
  struct Entry {
    int resource;
    rlimit value;
  };
  std::array<Entry, 8> entries{};
  size_t count = 0;
  std::vector<RlimitApplied> applied;  // the entries above, by name (the parent's; the child reads none)
};

RlimitSet prepare_rlimits(const plan::LimitsPlan& limits);
// Child side: returns 0 or an errno.
int apply_rlimits(const RlimitSet& set) noexcept;
// The RLIMIT_* names of the resources whose bits are set in `mask` (bit r: resource r).
std::vector<std::string> rlimit_names(uint32_t mask);

}  // namespace airlock::linux
