// airlock-serve: `airlock serve` (cmd_serve.cpp) on its own, so that the HTTP library it needs
// is loaded by the daemon and by no other verb. `airlock serve ARGS` execs this with ARGS.
#include "cli/app.h"

int main(int argc, char** argv) { return airlock::cli::run_app(argc, argv, {airlock::cli::add_serve}); }
