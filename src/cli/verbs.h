// The verbs: each registers its subcommand and sets `run` to the function that carries it out.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

#include "cli/common.h"

namespace airlock::cli {

using Action = std::function<int()>;

void add_policy(CLI::App& app, Globals& g, Action& run);
void add_doctor(CLI::App& app, Globals& g, Action& run);
void add_plan(CLI::App& app, Globals& g, Action& run);
void add_run(CLI::App& app, Globals& g, Action& run);
void add_escape_suite(CLI::App& app, Globals& g, Action& run);
void add_session(CLI::App& app, Globals& g, Action& run);
// --policy, --defaults, --workspace: what a verb that opens one session takes (session, mcp).
struct SessionCliOptions {
  std::optional<std::string> policy_file, defaults, workspace;
};
// Adds the three options to `cmd`; returns --policy (a verb may make it required).
CLI::Option* add_session_options(CLI::App* cmd, SessionCliOptions& o);
void add_receipts(CLI::App& app, Globals& g, Action& run);
void add_broker_suite(CLI::App& app, Globals& g, Action& run);
void add_tool(CLI::App& app, Globals& g, Action& run);
void add_ledger(CLI::App& app, Globals& g, Action& run);
void add_serve(CLI::App& app, Globals& g, Action& run);       // in airlock-serve
void add_serve_stub(CLI::App& app, Globals& g, Action& run);  // in airlock: execs airlock-serve
void add_mcp(CLI::App& app, Globals& g, Action& run);
// The doctor's report as JSON (`airlock doctor --json`, GET /v1/executors).
Json doctor_report(plan::Profile profile, const plan::HostFacts& facts);
// Hidden: `__probe`, the escape suite's scenario programs.
void add_probe(CLI::App& app, Globals& g, Action& run);
// `machine probe|list`, `slot set|list`, `runs list|show`: the run store.
void add_store_verbs(CLI::App& app, Globals& g, Action& run);

}  // namespace airlock::cli
