// The plant scenarios' probe and judge (plant_common.h).
#include "escape/scenarios/plant_common.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#if !AIRLOCK_PROBE_SIDE
#include "base/fs.h"
#endif

namespace airlock::escape::scenarios {

#if AIRLOCK_PROBE_SIDE

ProbeReport plant(std::span<const std::string_view> targets, const ProbeInput& in) {
  const std::string& ws = in.arg(0);
  std::vector<std::string> done, failed;
  for (std::string_view target : targets) {
    std::string rel(target);
    std::string line = rel.ends_with("/config")
                           ? fmt::format("\n[core]\n\tfsmonitor = echo {}\n", kPlantMarker)
                           : fmt::format("\n: {}\n", kPlantMarker);
    for (const std::string& path : {rel, ws + "/" + rel}) {
      std::error_code ec;
      std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0755);
      int e = fd < 0 ? errno : 0;
      if (fd >= 0) {
        if (::write(fd, line.data(), line.size()) < 0) e = errno;
        ::close(fd);
      }
      (e ? failed : done).push_back(e ? path + ": " + err_name(e) : path);
    }
  }
  return {{},
          !done.empty(),
          fmt::format("written [{}]; refused [{}]", fmt::join(done, ", "), fmt::join(failed, ", ")),
          0,
          Json::object()};
}

#else

Result<std::vector<std::string> > Plant::bait(Run& run) { return std::vector{run.workspace}; }

// The host's own workspace after close: a target holding the marker would run later.
Judged Plant::judge(Run& run, const Observed& o) {
  std::vector<std::string> planted;
  for (std::string_view rel : targets_)
    if (auto text = read_file(run.workspace + "/" + std::string(rel)); text && has(*text, kPlantMarker))
      planted.push_back(std::string(rel));
  std::vector<std::string> refused;
  if (o.write_back)
    for (const auto& r : o.write_back->refused) refused.push_back(r.path);
  Judged j;
  j.host = {{"planted_in_workspace", planted}, {"write_back_refused", refused}};
  j.breached = !planted.empty();
  j.evidence = fmt::format("{}; write-back refused [{}]; host: after close {}", o.probe_said(),
                           fmt::join(refused, ", "),
                           planted.empty() ? std::string("no target holds the marker")
                                           : fmt::format("PLANTED in {}", fmt::join(planted, ", ")));
  return j;
}

#endif

}  // namespace airlock::escape::scenarios
