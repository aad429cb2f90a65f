// CLI plumbing shared by the verbs: global options, state directory, policy loading, refusals.
#pragma once

#include <signal.h>

#include <functional>
#include <optional>
#include <thread>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/unique_fd.h"
#include "plan/host_facts.h"
#include "plan/plan.h"
#include "policy/policy_diff.h"
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

// A layer of the effective policy above the built-in default: its file and how it was found.
struct PolicyLayer {
  std::string origin;  // "--defaults" or "user" (defaults layer); "--policy" or "repository" (task layer)
  std::string file;
};
struct PolicyLayers {
  std::optional<PolicyLayer> defaults, task;
};

// The flags' files; without a flag, and when `discover_from` is a directory, discovery: the user's
// policy ($XDG_CONFIG_HOME or ~/.config, airlock/policy.json) for the defaults layer and the
// repository's (the nearest .airlock/policy.json at or above `discover_from`, normally at the
// repository's root) for the task layer.
PolicyLayers find_policy_layers(const std::optional<std::string>& defaults_flag,
                                const std::optional<std::string>& policy_flag,
                                const std::optional<std::string>& discover_from);
// The repository policy file that discovery from `dir` finds, if there is one: the nearest
// DIR/.airlock/policy.json at or above it whose .airlock is a directory of this user's or root's
// (or a symlink, which reading it refuses).
std::optional<std::string> repository_policy(const std::string& dir);
// Its bytes, read without following a symlink at .airlock or policy.json, from a regular file
// of this user's or root's of at most 1 MiB (AIRLOCK_POLICY_UNTRUSTED otherwise). `file` is
// absolute and ends in /.airlock/policy.json.
Result<std::string> read_repository_policy(const std::string& file);

// A repository's policy is code from whoever wrote the repository: it applies unasked only when it
// allows nothing the layers below it do not (policy::widenings). Otherwise it is refused,
// AIRLOCK_POLICY_UNTRUSTED with what it would allow, until the user allows that very version
// (`airlock policy allow`: its real path and sha256, recorded in the state directory).
Result<void> allow_repository_policy(const std::string& state_dir, const std::string& file, std::string_view text);

// The layers read and parsed, before the repository gate: the effective policy, the policy below
// the task layer, and what a repository layer allows that is not allowed yet (empty when none).
struct LayeredPolicy {
  policy::TaskPolicy policy, below_task;
  std::optional<std::string> task_text;
  std::vector<policy::Widening> untrusted;
};
Result<LayeredPolicy> read_policy_layers(const PolicyLayers& layers, const std::string& state_dir);

// `agent_run`: only an agent run may go on under `confinement: vendor`; any other verb (and the
// server) refuses it. `state_dir` holds the allowed repository policies (needed only when
// `layers.task` came from a repository).
Result<policy::TaskPolicy> load_policy(const PolicyLayers& layers, const std::string& state_dir,
                                       bool agent_run = false);
// The flags' files only, no discovery.
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
  PolicyLayers layers;  // where the policy's layers came from
};
// `agent_run`: only an agent run may go on under `confinement: vendor`; any other verb refuses it.
// `discover_from`: where policy discovery starts when a flag does not name a layer (none: no discovery).
Result<SessionStart> prepare_session(const Globals& g, const std::optional<std::string>& defaults_file,
                                     const std::optional<std::string>& policy_file, bool agent_run = false,
                                     const std::optional<std::string>& discover_from = std::nullopt);

// Blocks SIGINT, SIGTERM and SIGHUP in every thread (call before starting any): a thread then
// takes them from a signalfd on the returned mask and stops the session.
// `operator_kill`: SIGUSR1 too, the cue of `airlock session kill` (Session::listen_for_operator_kill).
sigset_t block_stop_signals(bool operator_kill = false);

// A thread that sleeps until a signal of `mask` (block_stop_signals') arrives, calling `on_stop`
// for each, until done() (also called by the destructor).
class StopSignalWaiter {
 public:
  StopSignalWaiter(const sigset_t& mask, std::function<void()> on_stop);
  ~StopSignalWaiter() { done(); }
  StopSignalWaiter(const StopSignalWaiter&) = delete;
  StopSignalWaiter& operator=(const StopSignalWaiter&) = delete;
  void done();

 private:
  UniqueFd sigfd_, donefd_;
  std::thread thread_;
};

// A command line as typed. CLI11 reads an argument "[a,b]" as the list a, b, and "[]" as nothing,
// so `airlock run grep '[0-9]' f` would run `grep 0-9 f`: `parsed` (what CLI11 made of the
// command's arguments) is replaced by the suffix of the raw arguments it came from.
std::vector<std::string> as_typed(const std::vector<std::string>& raw, const std::vector<std::string>& parsed);

}  // namespace airlock::cli
