// The verbs: each registers its subcommand and sets `run` to the function that carries it out.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "broker/session.h"
#include "cli/common.h"
#include "egress/door.h"
#include "escape/escape_suite.h"

namespace airlock::cli {

using Action = std::function<int()>;

// What `airlock run` and `airlock agent run` share: one confined command in one session.
struct RunOptions {
  std::optional<std::string> policy_file, defaults, workspace;
  bool quiet = false;
  std::string slot = "default";
  std::vector<std::string> command;
  std::vector<std::string> env;        // NAME=value added to the executor's environment
  std::vector<std::string> scrub_env;  // names removed from it, whatever added them
  int pass_fd = -1;                    // inherited as descriptor 3
  bool private_dirs = false;           // TMPDIR and HOME made by the command once confined
  Json agent;                          // the agent run, for the first receipt (null: none)
  std::optional<egress::ModelGateway> model_gateway;  // served by the session's door
  std::string machine;                 // --machine: another machine of the fleet runs it
  std::string summary_file;            // --summary-file: the --json summary written there, not printed
};

// What an agent run in vendor confinement records and prints, in these words.
inline constexpr std::string_view kVendorClaim = "airlock makes no claim the agent is confined";

// Opens a session under the policy, runs `o.command` in the planned executor, writes back on
// success, closes; returns the command's exit status or 125. `before` (agent runs) sees the
// loaded policy and measured facts first and may refuse; it may change o and the facts.
int run_confined(Globals& g, RunOptions& o, const std::function<Result<void>(SessionStart&)>& before = {});

// `airlock run --machine NAME`: the run composed on another machine of the fleet, over its ssh
// transport, only where its signed row asserts what the plan needs (cmd_store.cpp).
int run_on_machine_cli(Globals& g, RunOptions& o, const std::string& name);
// `airlock session --machine NAME`: the action protocol spoken with a session on that machine,
// through the same gate; its receipts come back as a run's do (o.command is empty).
int session_on_machine_cli(Globals& g, RunOptions& o, const std::string& name);
// The machines of the store as `machine list --json` shows them, each judged here (its signature,
// its facts, its attested isolation and why): for `airlock doctor`.
Result<Json> fleet_machines(const Globals& g, const std::string& state);

void add_policy(CLI::App& app, Globals& g, Action& run);
void add_doctor(CLI::App& app, Globals& g, Action& run);
void add_plan(CLI::App& app, Globals& g, Action& run);
void add_run(CLI::App& app, Globals& g, Action& run);
void add_escape_suite(CLI::App& app, Globals& g, Action& run);
void add_session(CLI::App& app, Globals& g, Action& run);
// --policy, --defaults, --workspace: what a verb that opens one session takes (session, mcp).
struct SessionCliOptions {
  std::optional<std::string> policy_file, defaults, workspace;
  std::optional<std::string> run_id;  // the run its json-protocol tool calls continue (SessionOptions::run_id)
  std::optional<std::string> credentials_command;  // fresh credentials per json-protocol dispatch
  bool credentials_env = false;                    // as AIRLOCK_CREDENTIALS instead of descriptor 3
  // The session options these add (run id, credentials) to a session opened under `so`.
  void apply(broker::SessionOptions& so) const;
};
// Whether the verb runs without --policy (under the built-in default) or refuses to.
enum class PolicyOption { Optional, Required };
// Adds the session's options to `cmd`, --policy's help saying what its absence means.
void add_session_options(CLI::App* cmd, SessionCliOptions& o, PolicyOption policy);
void add_receipts(CLI::App& app, Globals& g, Action& run);
void add_broker_suite(CLI::App& app, Globals& g, Action& run);
void add_tool(CLI::App& app, Globals& g, Action& run);
void add_ledger(CLI::App& app, Globals& g, Action& run);
// `approvals`, `approve ID`, `deny ID`: the person's side of a call held for approval.
void add_approvals(CLI::App& app, Globals& g, Action& run);
void add_serve(CLI::App& app, Globals& g, Action& run);       // in airlock-serve
void add_serve_stub(CLI::App& app, Globals& g, Action& run);  // in airlock: execs airlock-serve
void add_mcp(CLI::App& app, Globals& g, Action& run);
// The doctor's report as JSON (`airlock doctor --json`, GET /v1/executors).
Json doctor_report(plan::Profile profile, const plan::HostFacts& facts);
// `vm build`, `vm verify`: the microVM tier's guest image and its verification on this host.
void add_vm(CLI::App& app, Globals& g, Action& run);
void add_image(CLI::App& app, Globals& g, Action& run);
// `setup delegate USER`, `setup undelegate USER` (root): cgroups of its own for an unprivileged user.
void add_setup(CLI::App& app, Globals& g, Action& run);

// Runs the escape suite with `so`, cancelled by SIGINT, SIGTERM or SIGHUP; progress on a
// terminal's stderr unless `json`.
Result<escape::SuiteReport> run_escape_suite(escape::SuiteOptions so, bool json);
void print_escape_report(const escape::SuiteReport& report, bool json);
// `machine probe|list`, `slot set|list`, `runs list|show`: the run store.
void add_store_verbs(CLI::App& app, Globals& g, Action& run);
// `agent run --profile NAME -- ARGS`: a whole agent CLI under the plan's tier.
void add_agent(CLI::App& app, Globals& g, Action& run);
// `reference codes|policy`: the generated references of docs/reference/, as Markdown.
void add_reference(CLI::App& app, Globals& g, Action& run);

}  // namespace airlock::cli
