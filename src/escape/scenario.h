// What an escape-suite scenario file (escape/scenarios/<name>.cpp) defines and may use. A scenario
// is one file and one row of escape/scenarios.inc; the file is compiled twice:
//   - into airlock_escape, the suite (AIRLOCK_PROBE_SIDE unset): its host half, a class derived
//     from Scenario (its bait, what the host watches, its judge) and `make()`, which returns one;
//   - into airlock-probe, the probe program run inside the sandbox (AIRLOCK_PROBE_SIDE=1): its
//     probe, `ProbeReport probe(const ProbeInput&)`.
// Both live in namespace airlock::escape::scenarios::<name>. Each half sees only its own API below,
// so a probe cannot reach the broker, and the product binary carries no probe.
#pragma once

#include <sys/types.h>
#include <time.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "base/json_util.h"
#include "escape/escape_suite.h"

#if AIRLOCK_PROBE_SIDE

namespace airlock::escape {

// What a probe gets from `airlock-probe NAME --run MARKER [ARGS...]`: the run marker (the run's
// canary directory, in every probe process's argv) and the arguments its host half chose.
struct ProbeInput {
  std::string name;
  std::string marker;
  std::vector<std::string> args;
  const std::string& arg(size_t i) const;  // "" past the end
  int port(size_t i) const;                // arg(i) as a number, 0 if it is none
};

// errno as "ENOENT (No such file or directory)".
std::string err_name(int e);
// What was read, as a short printable string for the evidence.
std::string printable(std::string_view s, size_t max = 200);
struct ReadResult {
  int err = 0;
  std::string data;
};
// Up to `max` bytes of `path`, or the errno of the open or read.
ReadResult read_some(const std::string& path, size_t max = 4096);
// Creates `path` (never through a symlink, never over a file) holding `content`: 0 or the errno.
int write_new(const std::string& path, std::string_view content);
// All of `s` to `fd` with write(2): the probes never use stdio, whose buffer a fork would print twice.
void write_all(int fd, std::string_view s);
double monotonic_seconds(clockid_t clock);

}  // namespace airlock::escape

#else  // the host half

#include "escape/canaries.h"
#include "exec/executor.h"
#include "exec/session_view.h"

namespace airlock::broker {
class Session;
}

namespace airlock::escape {

// Everything the suite saw of one run, from the probe and from the host.
struct Observed {
  std::string output, errors;  // what the probe wrote, bounded
  std::optional<ProbeReport> probe;
  std::optional<exec::RunOutcome> outcome;
  std::optional<Error> run_error;
  std::optional<exec::WriteBackReport> write_back;
  std::optional<Error> close_error;
  uint64_t wall_limit_ms = 0;      // the plan's, plus the SIGTERM-to-SIGKILL grace
  std::vector<pid_t> left_behind;  // processes of the probe running after close (then killed)
  // The probe's report for the evidence, or why there is none.
  std::string probe_said() const;
};

// A scenario's verdict.
struct Judged {
  bool breached = false;
  std::string evidence;        // one line, for people: the probe's word, then the host's
  Json host = Json::object();  // what the host checked, as data (details.host_check)
  // The probe's `breached` means only that it staged the attempt (a symlink to write back, a
  // daemon to outlive the session): the suite then does not call a report the host did not
  // confirm a success that failed to reach the host.
  bool staged = false;
};

// One run of a scenario in one executor, as its host half sees it. Valid for the whole run.
struct Run {
  std::string name;
  const Bait& bait;
  Canaries& canaries;
  std::string workspace;  // the host's workspace of this run (root/ws-<name>), with .probe/ and out/
  std::string files;      // root/<name>: the prefix of the files this run's output goes to
  int null_fd = -1;       // /dev/null, read-only
  Json& details;          // the result's details: a scenario adds what a person needs to see
  // A session of this tier under the suite's own policy over `workspace`, for a scenario that runs
  // one beside the probe's (second_sandbox_files).
  std::function<Result<std::unique_ptr<broker::Session> >(const std::string& workspace)> open_session;
  // Set by bait() when the probe's stdin is not /dev/null (tiocsti_injection: a pty).
  int stdin_fd = -1;
};

// The host half of a scenario: one object per run, so what it set up lives in its members and is
// released with it. The suite calls, in order: bait, (the session opens) watch, (the probe runs,
// the session closes, its output is read) observe, (whatever the probe left is killed) judge.
class Scenario {
 public:
  virtual ~Scenario() = default;
  // What this scenario plants beyond the canaries every run shares, and the probe's arguments
  // (after `--run MARKER`). An error: the scenario could not run here (its verdict: unavailable).
  virtual Result<std::vector<std::string> > bait(Run& run) = 0;
  // What the host watches while the probe runs: a guard, released when the run ends.
  virtual std::shared_ptr<void> watch(Run& /*run*/) { return nullptr; }
  // After close, before what the probe left behind is killed: note what that would erase.
  virtual void observe(Run& /*run*/, const Observed& /*o*/) {}
  // The verdict. Wherever the breach shows on the host, the host is the judge and the probe's
  // report is evidence: inside an executor a path, a pid or an address may name something else
  // than on the host (a private /tmp, a pid namespace, a network namespace), so "it worked" from
  // inside proves nothing, and the host baseline proves that every host check detects its breach.
  virtual Judged judge(Run& run, const Observed& o) = 0;
};

// Helpers the judges share.
bool has(std::string_view haystack, std::string_view needle);  // false for an empty needle
std::string describe(const exec::RunOutcome& o);  // "exit 0 after 1.2 s, cpu 0.1 s, max rss 3 MiB"
// A read judged by its canary token: `host: WHAT IS IN|is not in WHERE` under `key`.
Judged token_in_output(const Observed& o, const std::string& token, const char* key, std::string_view what,
                       std::string_view where);
// Kernel objects of the probe's own (a ring, a user namespace, a keyring) that die with it: nothing
// the host can check afterwards, so the probe's report of its syscalls is the judge.
Judged judged_by_probe(const Observed& o);

}  // namespace airlock::escape

#endif  // AIRLOCK_PROBE_SIDE
