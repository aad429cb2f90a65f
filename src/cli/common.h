// CLI plumbing shared by the verbs: global options, state directory, policy loading, refusals.
#pragma once

#include <signal.h>

#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "plan/host_facts.h"
#include "plan/plan.h"
#include "policy/task_policy.h"

namespace airlock::cli {

// Exit status for every refusal of airlock's own.
inline constexpr int kRefusedExit = 125;
// Exit status for a command line airlock cannot parse (AIRLOCK_OPTION_INVALID), as getopt tools do.
inline constexpr int kUsageExit = 2;

struct Globals {
  std::string state_dir;      // --state-dir, $AIRLOCK_STATE_DIR, or the per-user default
  std::string profile = "production";
  bool json = false;
  std::string store_url;   // --store: postgresql://... or sqlite:PATH; default airlock.db in the state dir
  std::string machine_id;  // --machine-id: act as this machine in the store (see store_support.h)
  std::vector<std::string> args;  // argv[1..], for a verb that hands its command line on (serve)
};

Result<plan::Profile> parse_profile(const std::string& s);
// The state directory, created mode 0700 if missing.
Result<std::string> resolve_state_dir(const std::string& flag);

// Prints `airlock: refused: CODE: message` to stderr (with --json, also {"refused": ...} as one
// line of stdout; without, the facts on stderr) and returns 125.
int refuse(const Error& e, bool json);

// `agent_run`: only an agent run may go on under `confinement: vendor`; any other verb (and the
// server) refuses it.
Result<policy::TaskPolicy> load_policy(const std::optional<std::string>& defaults_file,
                                       const std::optional<std::string>& policy_file, bool agent_run = false);

std::string yes_no(bool b);

// What every verb that opens a session starts from: the profile, the state directory, the
// effective policy and the host facts that policy needs, measured.
struct SessionStart {
  plan::Profile profile;
  std::string state_dir;
  policy::TaskPolicy policy;
  plan::HostFacts facts;
};
// `agent_run`: only an agent run may go on under `confinement: vendor`; any other verb refuses it.
Result<SessionStart> prepare_session(const Globals& g, const std::optional<std::string>& defaults_file,
                                     const std::optional<std::string>& policy_file, bool agent_run = false);

// Blocks SIGINT, SIGTERM and SIGHUP in every thread (call before starting any): a thread then
// takes them from a signalfd on the returned mask and stops the session.
// `operator_kill`: SIGUSR1 too, the cue of `airlock session kill` (Session::listen_for_operator_kill).
sigset_t block_stop_signals(bool operator_kill = false);

}  // namespace airlock::cli
