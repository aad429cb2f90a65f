// airlock: the command-line entry point. Parses global options and hands off to one verb.
#include "cli/app.h"

int main(int argc, char** argv) {
  using namespace airlock::cli;
  return run_app(argc, argv,
                 {add_policy, add_doctor, add_plan, add_run, add_escape_suite, add_session, add_receipts,
                  add_broker_suite, add_tool, add_ledger, add_approvals, add_store_verbs, add_serve_stub, add_mcp, add_agent, add_vm, add_image, add_setup, add_reference});
}
