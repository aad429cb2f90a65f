// rlimits: the plan's per-process limits as a fixed table the child applies without allocating.
#pragma once

#include <sys/resource.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/json_util.h"
#include "plan/plan.h"

namespace airlock::linux {

struct RlimitSet {
  struct Entry {
    int resource;
    rlimit value;
  };
  std::array<Entry, 8> entries{};
  size_t count = 0;
  Json applied;
};

RlimitSet prepare_rlimits(const plan::LimitsPlan& limits);
// Child side: returns 0 or an errno.
int apply_rlimits(const RlimitSet& set) noexcept;
// The RLIMIT_* names of the resources whose bits are set in `mask` (bit r: resource r).
std::vector<std::string> rlimit_names(uint32_t mask);

}  // namespace airlock::linux
