// The command line both executables share: global options, the verbs each one registers, and
// the exit codes of a parse error or an escaped exception.
#pragma once

#include <initializer_list>

#include "cli/verbs.h"

namespace airlock::cli {

using AddVerb = void (*)(CLI::App&, Globals&, Action&);

// Parses argv with the global options and `verbs`, then runs the chosen verb.
int run_app(int argc, char** argv, std::initializer_list<AddVerb> verbs);

}  // namespace airlock::cli
