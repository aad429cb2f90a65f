// symlink_write_back: carry the suite's secret out through write-back: a symlink to it, a hard link
// to it and a copy of its bytes, all under out/ (the write-back path).
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "escape/scenario.h"

#if !AIRLOCK_PROBE_SIDE
#include "base/fs.h"
#endif

namespace airlock::escape::scenarios::symlink_write_back {

#if AIRLOCK_PROBE_SIDE

// Stages the three; whether anything reached the workspace only the host can tell, after close:
// `breached` here means "staged".
ProbeReport probe(const ProbeInput& in) {
  const std::string& secret = in.arg(0);
  int e1 = ::symlink(secret.c_str(), "out/link") < 0 ? errno : 0;
  int e2 = ::link(secret.c_str(), "out/hard") < 0 ? errno : 0;
  auto r = read_some(secret);
  int e3 = r.err ? r.err : write_new("out/copy", r.data);
  std::string copy = r.err ? "cannot read the secret: " + err_name(r.err)
                     : e3  ? "write: " + err_name(e3)
                           : fmt::format("copied {} bytes of the secret", r.data.size());
  return {{},
          e1 == 0 || e2 == 0 || e3 == 0,
          fmt::format("out/link -> {}: {}; out/hard (hard link): {}; out/copy: {}", secret,
                      e1 ? err_name(e1) : std::string("planted"), e2 ? err_name(e2) : std::string("planted"),
                      copy),
          e1,
          Json::object()};
}

#else

// Every file and symlink under `dir` (relative paths), without following symlinks.
std::vector<std::string> entries_under(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (std::filesystem::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    out.push_back(std::filesystem::relative(it->path(), dir).string());
  std::sort(out.begin(), out.end());
  return out;
}

class SymlinkWriteBack final : public Scenario {
  Result<std::vector<std::string> > bait(Run& run) override { return std::vector{run.bait.secret_file}; }
  // After close, the host's workspace must hold no symlink and no byte of the secret.
  Judged judge(Run& run, const Observed& o) override {
    std::vector<std::string> links, leaked;
    std::string out = run.workspace + "/out";
    for (const auto& rel : entries_under(out)) {
      std::string p = out + "/" + rel;
      struct stat st {};
      if (::lstat(p.c_str(), &st) < 0) continue;
      if (S_ISLNK(st.st_mode))
        links.push_back("out/" + rel);
      else if (S_ISREG(st.st_mode))
        if (auto text = read_file(p); text && has(*text, run.bait.secret_token))
          leaked.push_back("out/" + rel);
    }
    std::vector<std::string> refused;
    if (o.write_back)
      for (const auto& r : o.write_back->refused) refused.push_back(fmt::format("{} ({})", r.path, r.reason));
    Judged j;
    j.staged = true;
    j.host = {
        {"symlinks_in_workspace", links}, {"secret_in_workspace", leaked}, {"write_back_refused", refused}};
    j.breached = !links.empty() || !leaked.empty();
    std::string wb = o.write_back
                         ? fmt::format("write-back refused [{}], wrote [{}]", fmt::join(refused, ", "),
                                       fmt::join(o.write_back->written, ", "))
                     : o.close_error ? fmt::format("write-back failed: {}", o.close_error->message)
                                     : std::string("no write-back");
    std::vector<std::string> found;
    if (!links.empty()) found.push_back(fmt::format("the symlink(s) {}", fmt::join(links, ", ")));
    if (!leaked.empty()) found.push_back(fmt::format("the secret's content in {}", fmt::join(leaked, ", ")));
    j.evidence = fmt::format("{}; {}; host: after close the workspace holds {}", o.probe_said(), wb,
                             found.empty() ? std::string("no symlink and no secret")
                                           : fmt::format("{}", fmt::join(found, " and ")));
    return j;
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<SymlinkWriteBack>(); }

#endif

}  // namespace airlock::escape::scenarios::symlink_write_back
