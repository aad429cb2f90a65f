// airlock: the command-line entry point. Parses global options and hands off to one verb.
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string_view>

#include "base/custody.h"

#include "cli/verbs.h"

int main(int argc, char** argv) {
  using namespace airlock::cli;
  // Custody first, before a flag is parsed: an executable someone else could replace is not
  // airlock's to run. The hidden `__probe` is exempt: it is the escape suite's scenario program,
  // run inside sandboxes where the file's owner shows as the overflow id; it trusts nothing.
  if (argc < 2 || std::string_view(argv[1]) != "__probe")
    if (auto custody = airlock::check_executable_custody("/proc/self/exe", ::geteuid()); !custody) {
      refuse(custody.error(), false);
      return kRefusedExit;
    }
  CLI::App app{"airlock: a governed execution engine for AI agents"};
  app.require_subcommand(1);
  Globals g;
  app.add_option("--state-dir", g.state_dir, "state directory (receipts, session views)");
  app.add_option("--profile", g.profile, "production (default) or development")
      ->check(CLI::IsMember({"production", "development"}));
  app.add_option("--store", g.store_url, "run store: postgresql://... or sqlite:PATH (default: airlock.db in the state dir)");
  app.add_option("--machine-id", g.machine_id, "act as this machine in the run store (default: /etc/machine-id)");
  Action run;
  add_policy(app, g, run);
  add_doctor(app, g, run);
  add_plan(app, g, run);
  add_run(app, g, run);
  add_escape_suite(app, g, run);
  add_session(app, g, run);
  add_receipts(app, g, run);
  add_broker_suite(app, g, run);
  add_tool(app, g, run);
  add_ledger(app, g, run);
  add_probe(app, g, run);
  add_store_verbs(app, g, run);
  add_agent(app, g, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    return run ? run() : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "airlock: internal error: %s\n", e.what());
    return 70;
  }
}
