// door_ipv6: a TCP connection over IPv6 to a listener on ::1.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>

#include "escape/scenarios/door_common.h"

namespace airlock::escape::scenarios::door_ipv6 {

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput& in) {
  int port = in.port(kIpv6Port);
  int fd = connect_to("::1", port);
  int e = fd < 0 ? errno : 0;
  if (fd >= 0) {
    write_all(fd, "door_ipv6 " + in.marker + "\n");
    ::close(fd);
  }
  return {{},
          fd >= 0,
          fmt::format("connect [::1]:{}: {}", port, e ? err_name(e) : std::string("CONNECTED")),
          e,
          Json::object()};
}

#else

class DoorIpv6 final : public Door {
  // A host without an IPv6 loopback has no listener to reach: nothing to prove either way.
  Result<std::vector<std::string> > bait(Run& run) override {
    if (run.bait.door.ipv6_port == 0)
      return fail(Code::ConfigError, "no listener on ::1: " + run.bait.door.ipv6_missing);
    return Door::bait(run);
  }
  Judged judge(Run& run, const Observed& o) override {
    std::vector<std::string> got;
    for (const auto& c : run.canaries.take_connections())
      if (c.listener == "ipv6")
        got.push_back(has(c.first_line, run.bait.root) ? "ipv6" : "ipv6 (without the run marker)");
    return host_saw(o, "ipv6_connections", got,
                    fmt::format("the listener on [::1]:{}", run.bait.door.ipv6_port),
                    "accepted no connection", "ACCEPTED");
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<DoorIpv6>(); }

#endif

}  // namespace airlock::escape::scenarios::door_ipv6
