// Landlock: probe the ABI, prepare a ruleset in the parent, apply it in the child.
#pragma once

#include <string>

#include "base/error.h"
#include "base/unique_fd.h"
#include "plan/plan.h"

namespace airlock::linux {

// The live kernel's Landlock ABI; 0 when absent or disabled.
int probe_landlock_abi();

// Where the plan's anchors are on this host for this session.
struct LandlockAnchors {
  std::string view;
  std::string scratch;
};

struct PreparedLandlock {
  UniqueFd ruleset;
  int abi = 0;
  // The rules as applied: resolved paths and the ABI rights granted (for the receipt).
  Json applied;
};

// Parent side: re-checks the live ABI against the plan's floor (AIRLOCK_CONFINEMENT_BELOW_FLOOR),
// opens every rule path O_PATH and builds the ruleset. A missing non-optional path is an error.
Result<PreparedLandlock> prepare_landlock(const plan::LandlockPlan& plan, const LandlockAnchors& anchors);

// Child side, after no_new_privs: returns 0 or an errno. Allocation-free.
int apply_landlock(int ruleset_fd) noexcept;

// Child side, before apply_landlock: adds read access beneath `path` (a mount made in the
// child, such as a fresh /proc or the new root, that the parent could not open); with
// `directories_only`, listing directories but no file contents. Returns 0 or an errno.
int apply_landlock_read_rule(int ruleset_fd, const char* path, bool directories_only = false) noexcept;

}  // namespace airlock::linux
