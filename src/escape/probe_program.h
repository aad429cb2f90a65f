// airlock-probe, the escape suite's probe program: `airlock-probe NAME --run MARKER [ARGS...]` runs
// the probe half of scenario NAME (escape/scenarios/NAME.cpp) inside whatever executor started it
// and prints one JSON line, {"probe", "breached", "evidence", "errno", ...}. It never decides a
// verdict: the suite checks the host side too. A program of its own, never a verb of airlock: it
// runs inside sandboxes, where its owner shows as the overflow id, and it trusts nothing.
#pragma once

namespace airlock::escape {

// The whole program (src/cli/probe_main.cpp is its main). Exit 0 after a report, 2 on a usage error.
// Two names are not breaches: kSleeperProbe and kNeighbourProbe (escape_suite.h) never return.
int run_probe_program(int argc, char** argv);

}  // namespace airlock::escape
