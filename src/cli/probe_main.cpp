// airlock-probe: the escape suite's probe program (src/escape/probe_program.h), beside airlock.
#include "escape/probe_program.h"

int main(int argc, char** argv) { return airlock::escape::run_probe_program(argc, argv); }
