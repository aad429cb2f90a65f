// run_captured: one command run with its stdin supplied, its stdout and stderr captured and bounded.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "base/error.h"
#include "exec/executor.h"

namespace airlock::exec {

// How much of stderr a captured run keeps: its last bytes, which is where a failure is told.
inline constexpr size_t kStderrTailBytes = 4096;

struct CapturedRun {
  RunOutcome outcome;
  std::string out;       // stdout, at most max_output bytes
  std::string err_tail;  // the last kStderrTailBytes of stderr
  // stdout and stderr together passed max_output: the run was stopped (outcome.stopped) and
  // `out` holds only what came before the limit.
  bool output_limited = false;
};

// Runs `cmd` on `executor` with `stdin_data` as its whole stdin (then end of file) and its
// stdout and stderr captured. When stdout and stderr together exceed `max_output` bytes the
// run is stopped with Executor::stop_run() (SIGTERM, grace, SIGKILL) and output_limited set;
// what the command writes after that is read and dropped, so it never blocks on a full pipe.
// cmd.stdin_fd, stdout_fd and stderr_fd are replaced; everything else of `cmd` is used as is.
// The run's own end (exit, signal, timeout) is in `outcome`: turning it into a refusal is the
// caller's decision. An error is only a failure to start or supervise the run.
Result<CapturedRun> run_captured(Executor& executor, const Command& cmd, std::string_view stdin_data,
                                 size_t max_output);

}  // namespace airlock::exec
