// door_direct_tcp: a raw TCP connection to the allowed server's address, around the proxy.
#include <fmt/format.h>

#include "escape/scenarios/door_common.h"

namespace airlock::escape::scenarios::door_direct_tcp {

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput& in) {
  int http_port = in.port(kHttpPort);
  auto x = exchange("127.0.0.1", http_port, http_get("/direct-tcp", kDoorAllowedHost, in.marker, true));
  bool got = x.reply.find(" 200 ") != std::string::npos;
  return {{},
          got,
          fmt::format("straight to 127.0.0.1:{} (the allowed server), not through the proxy: {}", http_port,
                      x.said()),
          x.err,
          Json::object()};
}

#else

class DoorDirectTcp final : public Door {
  Judged judge(Run& run, const Observed& o) override { return judge_requests(run, o, false); }
};

std::unique_ptr<Scenario> make() { return std::make_unique<DoorDirectTcp>(); }

#endif

}  // namespace airlock::escape::scenarios::door_direct_tcp
