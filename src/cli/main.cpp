// airlock: the command-line entry point. Parses global options and hands off to one verb.
#include <cstdio>
#include <exception>

#include "cli/verbs.h"

int main(int argc, char** argv) {
  using namespace airlock::cli;
  CLI::App app{"airlock: a governed execution engine for AI agents"};
  app.require_subcommand(1);
  Globals g;
  app.add_option("--state-dir", g.state_dir, "state directory (receipts, session views)");
  app.add_option("--profile", g.profile, "production (default) or development")
      ->check(CLI::IsMember({"production", "development"}));
  Action run;
  add_policy(app, g, run);
  add_doctor(app, g, run);
  add_plan(app, g, run);
  add_run(app, g, run);
  add_escape_suite(app, g, run);
  add_session(app, g, run);
  add_receipts(app, g, run);
  add_broker_suite(app, g, run);
  add_probe(app, g, run);
  add_serve(app, g, run);
  add_mcp(app, g, run);
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
