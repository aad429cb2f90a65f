// What one effective policy allows that another does not: `airlock policy diff`, and the gate on
// a policy found in a repository (it applies unasked only when it allows nothing more). Pure.
#pragma once

#include <string>
#include <vector>

#include "base/json_util.h"
#include "policy/task_policy.h"

namespace airlock::policy {

// One thing `a` allows that `b` does not.
struct Widening {
  std::string field;  // JSON path of the field: "$.egress", "$.limits.memory_mb", ...
  std::string what;   // in words: "allows egress to pypi.org ports [443] (https)"
  Json to_json() const { return {{"field", field}, {"what", what}}; }
};

// Conservative: a change airlock cannot rank (another executor, another workspace, another
// write-back timing) counts as a widening. Empty when `a` is the same as `b` or narrower.
std::vector<Widening> widenings(const TaskPolicy& a, const TaskPolicy& b);

}  // namespace airlock::policy
