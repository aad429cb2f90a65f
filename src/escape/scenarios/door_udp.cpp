// door_udp: a UDP datagram to a sink on loopback.
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "escape/scenarios/door_common.h"

namespace airlock::escape::scenarios::door_udp {

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput& in) {
  int udp_port = in.port(kUdpPort);
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {{}, false, "socket(AF_INET, SOCK_DGRAM): " + err_name(errno), errno, Json::object()};
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(udp_port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string msg = "door_udp " + in.marker + "\n";
  int e =
      ::sendto(fd, msg.data(), msg.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to) < 0 ? errno : 0;
  ::close(fd);
  return {{},
          e == 0,
          fmt::format("sendto 127.0.0.1:{}: {}", udp_port, e ? err_name(e) : std::string("SENT")),
          e,
          Json::object()};
}

#else

class DoorUdp final : public Door {
  Judged judge(Run& run, const Observed& o) override {
    std::vector<std::string> got;
    for (const auto& d : run.canaries.take_datagrams())
      if (has(d, run.bait.root)) got.push_back(d.substr(0, 200));
    return host_saw(o, "datagrams_with_run_marker", got,
                    fmt::format("the UDP sink on 127.0.0.1:{}", run.bait.door.udp_port),
                    "received nothing of the probe's", "RECEIVED");
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<DoorUdp>(); }

#endif

}  // namespace airlock::escape::scenarios::door_udp
