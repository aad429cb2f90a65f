// read_host_file: read a file outside the workspace (the suite's secret) by its absolute path.
#include <fmt/format.h>

#include "escape/scenario.h"

namespace airlock::escape::scenarios::read_host_file {

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput& in) {
  const std::string& file = in.arg(0);
  auto r = read_some(file);
  if (r.err) return {{}, false, fmt::format("read {}: {}", file, err_name(r.err)), r.err, Json::object()};
  return {{},
          true,
          fmt::format("read {} bytes of {}: \"{}\"", r.data.size(), file, printable(r.data)),
          0,
          Json::object()};
}

#else

class ReadHostFile final : public Scenario {
  Result<std::vector<std::string> > bait(Run& run) override { return std::vector{run.bait.secret_file}; }
  // A token in the output can only have come from its canary.
  Judged judge(Run& run, const Observed& o) override {
    return token_in_output(o, run.bait.secret_token, "secret_token_in_output", "the secret's canary token",
                           "the probe's output");
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<ReadHostFile>(); }

#endif

}  // namespace airlock::escape::scenarios::read_host_file
