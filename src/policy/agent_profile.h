// Agent profiles: what airlock knows of an agent CLI (Claude Code, Codex, Gemini): its
// executable, the arguments that switch its own safety off, its model and resume flags, its
// credential files and variables. Data in agents/*.json, built into the binary; pure.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json_util.h"
#include "policy/task_policy.h"

namespace airlock::policy {

inline constexpr std::string_view kAgentProfileSchema = "airlock.agent_profile.v1";

// A flag whose value switches safety off: `--flag value` or `--flag=value`, value exact.
struct BypassValue {
  std::string flag;
  std::vector<std::string> values;
};

struct AgentProfile {
  std::string name;
  std::string npm_package;
  std::string executable;                   // resolved against the trusted PATH unless given
  std::vector<std::string> bypass_tokens;   // refused as an exact argument or as TOKEN=value
  std::vector<BypassValue> bypass_values;
  std::vector<std::string> model_flags;     // --model NAME or --model=NAME
  std::vector<std::string> resume_flags;    // --resume [ID]
  std::vector<std::string> resume_commands; // a leading sequence of arguments ("exec resume")
  std::vector<std::string> continue_flags;
  std::vector<std::string> credential_files;      // "~/" is the operator's home
  std::vector<std::string> credential_variables;
  std::vector<std::string> config_files;          // configuration that names the credentials
  std::vector<std::string> config_dirs;
  // Under `confinement: vendor` the agent tool's own sandbox is all there is, so airlock composes
  // the tool's strictest per-run settings (its sandbox on, network off unless the policy allows
  // it, no retry outside the sandbox, its strict-configuration mode), records them, and refuses
  // the operator's arguments that would override them.
  struct VendorSettings {
    std::vector<std::string> network_off, network_allowed;
    std::vector<std::string> reserved_flags;  // refused as FLAG, FLAG=value
  } vendor_settings;
  // Under `confinement: engine` airlock confines every process the agent starts, and a tool's own
  // sandbox cannot nest inside (airlock's seccomp refuses new namespaces): these arguments, composed
  // before the operator's, turn the tool's own sandbox off so its commands run under airlock's.
  std::vector<std::string> engine_arguments;
  // How the agent reaches its model without ever holding its key (`airlock agent run`): the
  // network door serves a model gateway, plain HTTP on the door's address inside the sandbox, that
  // forwards each request to `upstream` over verified TLS with the credential header swapped for
  // the operator's key. The agent gets a placeholder in `placeholder_variables`, and the gateway's
  // URL (plus `base_url_path`) in `base_url_variable` and/or in `arguments` (each "{url}" replaced),
  // added before the operator's. Absent: the credential goes over fd 3.
  struct ModelGateway {
    std::string upstream;           // https://host[:port], no path
    std::string credential_header;  // lower-case: "x-api-key", "authorization"
    std::string credential_prefix;  // what precedes the key in it: "", "Bearer "
    std::vector<std::string> placeholder_variables;
    std::string base_url_variable;  // "": none
    std::string base_url_path;      // "", "/v1"
    std::vector<std::string> arguments;
    std::vector<std::string> paths;  // what the gateway forwards (egress::ModelGateway::paths)
  };
  std::optional<ModelGateway> model_gateway;
};

// https://host[:port] and nothing more: what a model gateway's upstream may be.
bool is_model_upstream(std::string_view url);

// Strict parse of one profile document (unknown keys refused with their JSON path).
Result<AgentProfile> parse_agent_profile(const Json& doc);
Json to_json(const AgentProfile& p);

// The profiles built into this binary (agents/*.json), by name.
const std::vector<AgentProfile>& builtin_agent_profiles();
// AIRLOCK_OPTION_INVALID naming the known profiles when `name` is not one of them.
Result<AgentProfile> find_agent_profile(const std::string& name);

// Checks the agent's arguments (after the executable) before anything starts:
// AIRLOCK_BYPASS_REFUSED for a bypass token (exact, or TOKEN=value; never a prefix or
// substring), a model other than the policy's, a resume or continue the policy did not ask for.
// The closed list of known bypass tokens, refused on every agent's final command line whatever
// the profile (a Claude Code flag passed to Codex is refused too): each matched as an exact
// argument, and a flag as FLAG=value. The profiles' own lists add short forms and value flags.
inline constexpr std::string_view kSharedBypassTokens[] = {
    "--dangerously-skip-permissions",            // Claude Code
    "--allow-dangerously-skip-permissions",      // Claude Code
    "--permission-mode=bypassPermissions",       // Claude Code
    "--dangerously-bypass-approvals-and-sandbox",  // Codex
    "--dangerously-bypass-hook-trust",           // Codex
    "--sandbox=danger-full-access",              // Codex
    "--config=sandbox_mode=danger-full-access",  // Codex
    "--yolo",                                    // Gemini CLI
    "--approval-mode=yolo",                      // Gemini CLI
};

Result<void> check_agent_args(const AgentProfile& profile, const std::vector<std::string>& args,
                              const AgentPolicy& wanted);
// Under vendor confinement: AIRLOCK_BYPASS_REFUSED for an argument that would override the
// settings airlock composes (the profile's reserved flags).
Result<void> check_vendor_args(const AgentProfile& profile, const std::vector<std::string>& args);

// Every credential file and configuration file of every built-in profile, with "~/" made `home`.
std::vector<std::string> credential_paths(const std::string& home);
// Every credential variable of every built-in profile.
std::vector<std::string> credential_variables();

}  // namespace airlock::policy
