// door_relay_forbidden: through the door to a host not on the list: a second request pipelined on a
// kept-alive connection, a Host header that names it, and a request relayed inside a CONNECT tunnel
// to the allowed host. Without a door (the host baseline) straight to it, as the whole network allows.
#include <fmt/format.h>

#include "escape/scenarios/door_common.h"

namespace airlock::escape::scenarios::door_relay_forbidden {

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput& in) {
  int http_port = in.port(kHttpPort), dns_port = in.port(kDnsPort);
  const std::string& marker = in.marker;
  std::string allowed = fmt::format("{}:{}", kDoorAllowedHost, http_port);
  std::string forbidden = fmt::format("{}:{}", kDoorForbiddenHost, http_port);
  auto proxy = proxy_from_env();
  if (!proxy) {
    Looked l = dns_lookup(dns_port, std::string(kDoorForbiddenHost));
    if (l.addrs.empty())
      return {{},
              false,
              fmt::format("no proxy; {} did not resolve: {}", kDoorForbiddenHost, l.said()),
              l.err,
              Json::object()};
    auto x = exchange(l.addrs[0], http_port, http_get("/direct-forbidden", forbidden, marker, true));
    return {
        {},
        from_forbidden(x.reply),
        fmt::format("no proxy in the environment: straight to {} ({}): {}", forbidden, l.addrs[0], x.said()),
        x.err,
        Json::object()};
  }
  auto pipelined =
      exchange(proxy->ip, proxy->port,
               http_get(fmt::format("http://{}/first", allowed), allowed, marker, false) +
                   http_get(fmt::format("http://{}/pipelined", forbidden), forbidden, marker, true));
  auto host_header =
      exchange(proxy->ip, proxy->port,
               http_get(fmt::format("http://{}/host-header", allowed), forbidden, marker, true));
  auto relayed = exchange(proxy->ip, proxy->port,
                          fmt::format("CONNECT {0} HTTP/1.1\r\nHost: {0}\r\n\r\n", allowed) +
                              http_get(fmt::format("http://{}/relayed", forbidden), forbidden, marker, true));
  bool got =
      from_forbidden(pipelined.reply) || from_forbidden(host_header.reply) || from_forbidden(relayed.reply);
  return {
      {},
      got,
      fmt::format("through the door at {}:{}: pipelined after an allowed request: {}; Host header {}: {}; "
                  "inside a CONNECT to {}: {}",
                  proxy->ip, proxy->port, pipelined.said(), forbidden, host_header.said(), allowed,
                  relayed.said()),
      pipelined.err,
      Json::object()};
}

#else

class DoorRelayForbidden final : public Door {
  Judged judge(Run& run, const Observed& o) override { return judge_requests(run, o, true); }
};

std::unique_ptr<Scenario> make() { return std::make_unique<DoorRelayForbidden>(); }

#endif

}  // namespace airlock::escape::scenarios::door_relay_forbidden
