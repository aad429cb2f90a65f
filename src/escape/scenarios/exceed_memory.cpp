// exceed_memory: allocate and touch kProbeMemoryMib, above a real tier's memory limit.
#include <fmt/format.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "escape/scenario.h"

namespace airlock::escape::scenarios::exceed_memory {

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput& in) {
  size_t mib = static_cast<size_t>(std::atol(in.arg(0).c_str()));
  size_t bytes = mib << 20;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    return {{}, false, fmt::format("mmap({} MiB): {}", mib, err_name(e)), e, Json::object()};
  }
  std::memset(p, 0xa5, bytes);  // touch every page: resident, not just reserved
  return {{}, true, fmt::format("allocated and touched {} MiB", mib), 0, Json::object()};
}

#else

class ExceedMemory final : public Scenario {
  Result<std::vector<std::string> > bait(Run&) override {
    return std::vector{std::to_string(kProbeMemoryMib)};
  }
  // Using the resource is the breach: the probe's own report counts, and so does its peak RSS.
  Judged judge(Run&, const Observed& o) override {
    int64_t rss_mib = o.outcome ? o.outcome->max_rss_kb / 1024 : 0;
    bool big = rss_mib >= kProbeMemoryMib * 9 / 10;
    Judged j;
    j.host = {{"max_rss_mib", rss_mib}};
    j.breached = (o.probe && o.probe->breached) || big;
    j.evidence =
        fmt::format("{}; host: max rss {} MiB{}", o.probe_said(), rss_mib, o.outcome ? "" : " (no outcome)");
    return j;
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<ExceedMemory>(); }

#endif

}  // namespace airlock::escape::scenarios::exceed_memory
