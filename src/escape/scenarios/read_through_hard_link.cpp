// read_through_hard_link: read a file outside the workspace through a hard link the workspace
// already held before the session opened (as a local clone or a careless copy can leave one).
#include <fmt/ranges.h>
#include <unistd.h>

#include <cerrno>

#include "escape/scenario.h"

namespace airlock::escape::scenarios::read_through_hard_link {

#if AIRLOCK_PROBE_SIDE

// Reads the workspace's second name of the secret, from the view and straight from the workspace
// (where it is on a host without a view around it).
ProbeReport probe(const ProbeInput& in) {
  std::vector<std::string> said;
  bool read = false;
  for (const std::string& path : {std::string("out/linked"), in.arg(0) + "/out/linked"}) {
    auto r = read_some(path);
    read = read || !r.err;
    said.push_back(r.err ? fmt::format("{}: {}", path, err_name(r.err))
                         : fmt::format("{}: \"{}\"", path, printable(r.data)));
  }
  return {{}, read, fmt::format("{}", fmt::join(said, "; ")), 0, Json::object()};
}

#else

class ReadThroughHardLink final : public Scenario {
  Result<std::vector<std::string> > bait(Run& run) override {
    if (::link(run.bait.secret_file.c_str(), (run.workspace + "/out/linked").c_str()) < 0)
      return fail_errno(Code::IoError, "link the secret into the workspace", errno);
    return std::vector{run.workspace};
  }
  Judged judge(Run& run, const Observed& o) override {
    return token_in_output(o, run.bait.secret_token, "secret_token_in_output", "the secret's canary token",
                           "the output");
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<ReadThroughHardLink>(); }

#endif

}  // namespace airlock::escape::scenarios::read_through_hard_link
