// CLI plumbing shared by the verbs: global options, state directory, policy loading, refusals.
#pragma once

#include <optional>
#include <string>

#include "base/error.h"
#include "plan/plan.h"
#include "policy/task_policy.h"

namespace airlock::cli {

// Exit status for every refusal of airlock's own.
inline constexpr int kRefusedExit = 125;

struct Globals {
  std::string state_dir;      // --state-dir, $AIRLOCK_STATE_DIR, or the per-user default
  std::string profile = "production";
  bool json = false;
};

Result<plan::Profile> parse_profile(const std::string& s);
// The state directory, created mode 0700 if missing.
Result<std::string> resolve_state_dir(const std::string& flag);

// Prints `airlock: refused: CODE: message` (and facts with --json to stdout) and returns 125.
int refuse(const Error& e, bool json);

Result<policy::TaskPolicy> load_policy(const std::optional<std::string>& defaults_file,
                                       const std::optional<std::string>& policy_file);

std::string yes_no(bool b);

// What every verb that runs something starts from: the profile, the state directory, the policy.
struct VerbBasics {
  plan::Profile profile;
  std::string state_dir;
  policy::TaskPolicy policy;
};
Result<VerbBasics> load_basics(const Globals& g, const std::optional<std::string>& defaults_file,
                               const std::optional<std::string>& policy_file);

}  // namespace airlock::cli
