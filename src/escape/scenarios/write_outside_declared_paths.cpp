// write_outside_declared_paths: write a file outside the workspace, one straight into the real
// workspace, and one in the view outside the write-back paths (which must never be written back).
#include <fmt/format.h>
#include <sys/stat.h>

#include "escape/scenario.h"

namespace airlock::escape::scenarios::write_outside_declared_paths {

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput& in) {
  const std::string &outside = in.arg(0), &direct = in.arg(1), &view_name = in.arg(2);
  int e1 = write_new(outside, "escaped\n"), e2 = write_new(direct, "escaped\n"),
      e3 = write_new(view_name, "stray\n");
  auto said = [](int e) { return e ? err_name(e) : std::string("WRITTEN"); };
  return {{},
          e1 == 0 || e2 == 0,
          fmt::format(
              "outside the workspace {}: {}; in the real workspace {}: {}; the view's ./{} (not a write-back "
              "path): {}",
              outside, said(e1), direct, said(e2), view_name,
              e3 ? err_name(e3) : std::string("written (only in the view)")),
          e1 ? e1 : e2,
          Json::object()};
}

#else

bool exists_nofollow(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

class WriteOutsideDeclaredPaths final : public Scenario {
  std::string outside_file_, direct_file_;
  const std::string view_name_ = "stray.txt";

  Result<std::vector<std::string> > bait(Run& run) override {
    outside_file_ = run.bait.outside_dir + "/escaped-" + run.name + ".txt";
    direct_file_ = run.workspace + "/escaped-direct.txt";
    return std::vector{outside_file_, direct_file_, view_name_};
  }
  // Whether any of the three files exists on the host after close.
  Judged judge(Run& run, const Observed& o) override {
    bool outside = exists_nofollow(outside_file_), direct = exists_nofollow(direct_file_),
         stray = exists_nofollow(run.workspace + "/" + view_name_);
    Judged j;
    j.host = {{"outside_file_exists", outside},
              {"workspace_file_exists", direct},
              {"view_file_written_back", stray}};
    j.breached = outside || direct || stray;
    j.evidence =
        fmt::format("{}; host: outside the workspace {}, in the real workspace {}, ./{} written back {}",
                    o.probe_said(), outside ? "the file EXISTS" : "nothing",
                    direct ? "the file EXISTS" : "nothing", view_name_, stray ? "YES" : "no");
    return j;
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<WriteOutsideDeclaredPaths>(); }

#endif

}  // namespace airlock::escape::scenarios::write_outside_declared_paths
