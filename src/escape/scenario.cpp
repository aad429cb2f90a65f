// The helpers the scenarios' judges share (escape/scenario.h, the host half).
#include "escape/scenario.h"

#include <fmt/format.h>

namespace airlock::escape {

bool has(std::string_view haystack, std::string_view needle) {
  return !needle.empty() && haystack.find(needle) != std::string_view::npos;
}

std::string describe(const exec::RunOutcome& o) {
  std::string how = o.status.signaled ? fmt::format("killed by signal {}", o.status.signal)
                                      : fmt::format("exit {}", o.status.code);
  std::string why = o.timed_out ? " at the wall-time limit" : o.stopped ? " (stopped)" : "";
  return fmt::format("{}{} after {:.1f} s, cpu {:.1f} s, max rss {} MiB", how, why, o.wall_ms / 1000.0,
                     (o.user_us + o.system_us) / 1e6, o.max_rss_kb / 1024);
}

std::string Observed::probe_said() const {
  if (probe) return probe->evidence;
  std::string how =
      outcome     ? describe(*outcome)
      : run_error ? fmt::format("the run was refused: {}: {}", to_name(run_error->code), run_error->message)
                  : "no outcome";
  return fmt::format("the probe printed no report ({})", how);
}

Judged token_in_output(const Observed& o, const std::string& token, const char* key, std::string_view what,
                       std::string_view where) {
  bool seen = has(o.output, token);
  Judged j;
  j.host = {{key, seen}};
  j.breached = seen;
  j.evidence = fmt::format("{}; host: {} {} {}", o.probe_said(), what, seen ? "IS IN" : "is not in", where);
  return j;
}

Judged judged_by_probe(const Observed& o) {
  Judged j;
  j.host = {{"observable_from_host", false}};
  j.breached = o.probe && o.probe->breached;
  j.evidence = fmt::format("{}; host: not observable from the host, judged by the probe's syscall results",
                           o.probe_said());
  return j;
}

}  // namespace airlock::escape
