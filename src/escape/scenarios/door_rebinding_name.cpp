// door_rebinding_name: a name whose answer changes between lookups: the allowed address first, then
// a forbidden one. Through the door, twice (a door that checks one lookup and connects by another
// is fooled); without one, the check-then-connect of a naive client.
#include <fmt/format.h>

#include "escape/scenarios/door_common.h"

namespace airlock::escape::scenarios::door_rebinding_name {

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput& in) {
  int http_port = in.port(kHttpPort), dns_port = in.port(kDnsPort);
  const std::string& marker = in.marker;
  std::string host = fmt::format("{}:{}", kDoorRebindHost, http_port);
  auto proxy = proxy_from_env();
  if (!proxy) {
    Looked first = dns_lookup(dns_port, std::string(kDoorRebindHost));
    Looked second = dns_lookup(dns_port, std::string(kDoorRebindHost));
    if (second.addrs.empty())
      return {{},
              false,
              fmt::format("no proxy; {} did not resolve a second time: {}", kDoorRebindHost, second.said()),
              second.err,
              Json::object()};
    auto x = exchange(second.addrs[0], http_port, http_get("/direct-rebound", host, marker, true));
    return {{},
            from_forbidden(x.reply),
            fmt::format("no proxy in the environment: {} checked as {}, then connected to {}: {}",
                        kDoorRebindHost, first.said(), second.addrs[0], x.said()),
            x.err,
            Json::object()};
  }
  auto one =
      exchange(proxy->ip, proxy->port, http_get(fmt::format("http://{}/first", host), host, marker, true));
  auto two =
      exchange(proxy->ip, proxy->port, http_get(fmt::format("http://{}/rebound", host), host, marker, true));
  return {{},
          from_forbidden(one.reply) || from_forbidden(two.reply),
          fmt::format("through the door at {}:{}: first request: {}; second: {}", proxy->ip, proxy->port,
                      one.said(), two.said()),
          one.err ? one.err : two.err,
          Json::object()};
}

#else

class DoorRebindingName final : public Door {
  Judged judge(Run& run, const Observed& o) override { return judge_requests(run, o, true); }
};

std::unique_ptr<Scenario> make() { return std::make_unique<DoorRebindingName>(); }

#endif

}  // namespace airlock::escape::scenarios::door_rebinding_name
