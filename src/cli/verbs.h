// The verbs: each registers its subcommand and sets `run` to the function that carries it out.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

#include "cli/common.h"
#include "escape/escape_suite.h"

namespace airlock::cli {

using Action = std::function<int()>;

void add_policy(CLI::App& app, Globals& g, Action& run);
void add_doctor(CLI::App& app, Globals& g, Action& run);
void add_plan(CLI::App& app, Globals& g, Action& run);
void add_run(CLI::App& app, Globals& g, Action& run);
void add_escape_suite(CLI::App& app, Globals& g, Action& run);
void add_session(CLI::App& app, Globals& g, Action& run);
void add_receipts(CLI::App& app, Globals& g, Action& run);
void add_broker_suite(CLI::App& app, Globals& g, Action& run);
void add_tool(CLI::App& app, Globals& g, Action& run);
void add_ledger(CLI::App& app, Globals& g, Action& run);
// `vm build`, `vm verify`: the microVM tier's guest image and its verification on this host.
void add_vm(CLI::App& app, Globals& g, Action& run);

// Runs the escape suite with `so`, cancelled by SIGINT, SIGTERM or SIGHUP; progress on a
// terminal's stderr unless `json`.
Result<escape::SuiteReport> run_escape_suite(escape::SuiteOptions so, bool json);
void print_escape_report(const escape::SuiteReport& report, bool json);
// Hidden: `__probe`, the escape suite's scenario programs.
void add_probe(CLI::App& app, Globals& g, Action& run);
// `machine probe|list`, `slot set|list`, `runs list|show`: the run store.
void add_store_verbs(CLI::App& app, Globals& g, Action& run);

}  // namespace airlock::cli
