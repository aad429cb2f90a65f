// Landlock: probe the ABI, prepare a ruleset in the parent, apply it in the child.
#pragma once

#include <string>
#include <vector>

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

// One rule as applied: the path it resolved to, the plan's access group, and the ABI rights
// (LANDLOCK_ACCESS_FS_* names, lower case) that group granted there.
struct LandlockRuleApplied {
  std::string path;
  plan::Access access;
  std::vector<std::string> rights;
};

// The ruleset as applied, for the receipt (exec::Enforced).
struct LandlockApplied {
  int abi = 0;                          // the live kernel's
  std::vector<std::string> handled_fs;  // every filesystem right the ruleset handles
  bool tcp_bind_connect_denied = false;  // TCP bind and connect handled: only the ports below
  std::vector<int> tcp_connect_ports;
  bool scoped_abstract_unix = false;
  bool scoped_signal = false;
  std::vector<LandlockRuleApplied> rules;  // a missing optional path has none
};

struct PreparedLandlock {
  UniqueFd ruleset;
  LandlockApplied applied;
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
