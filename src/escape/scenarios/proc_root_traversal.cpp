// proc_root_traversal: read the suite's secret through /proc/<host pid>/root, which is that
// process's view of the file system, whatever the reader's own mount namespace or Landlock domain
// shows.
#include <fmt/format.h>

#include "escape/scenario.h"

namespace airlock::escape::scenarios::proc_root_traversal {

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput& in) {
  std::string path = "/proc/" + in.arg(0) + "/root" + in.arg(1);
  auto r = read_some(path);
  if (r.err) return {{}, false, fmt::format("read {}: {}", path, err_name(r.err)), r.err, Json::object()};
  return {{},
          true,
          fmt::format("read {} bytes of {}: \"{}\"", r.data.size(), path, printable(r.data)),
          0,
          Json::object()};
}

#else

class ProcRootTraversal final : public Scenario {
  // The host process to go through: the suite's sleeper.
  Result<std::vector<std::string> > bait(Run& run) override {
    return std::vector{std::to_string(run.bait.sleeper_pid), run.bait.secret_file};
  }
  Judged judge(Run& run, const Observed& o) override {
    return token_in_output(o, run.bait.secret_token, "secret_token_in_output", "the secret's canary token",
                           "the probe's output");
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<ProcRootTraversal>(); }

#endif

}  // namespace airlock::escape::scenarios::proc_root_traversal
