// reach_network: connect to the suite's three listeners on the host: TCP on 127.0.0.1, a pathname
// unix socket (what an ssh-agent or a container daemon offers) and an abstract unix socket.
#include <arpa/inet.h>
#include <fmt/ranges.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "escape/scenario.h"

namespace airlock::escape::scenarios::reach_network {

#if AIRLOCK_PROBE_SIDE

// Sends the run marker on each connection, so the host knows whose it was.
ProbeReport probe(const ProbeInput& in) {
  const std::string &port = in.arg(0), &unix_path = in.arg(1), &abstract_name = in.arg(2);
  std::string hello = "reach_network " + in.marker + "\n";
  int first_err = 0;
  bool reached = false;
  auto attempt = [&](int family, const sockaddr* a, socklen_t len) -> std::string {
    int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      if (!first_err) first_err = errno;
      return "socket: " + err_name(errno);
    }
    if (::connect(fd, a, len) < 0) {
      int e = errno;
      ::close(fd);
      if (!first_err) first_err = e;
      return "connect: " + err_name(e);
    }
    write_all(fd, hello);
    ::close(fd);
    reached = true;
    return "CONNECTED";
  };
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(port.c_str())));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string tcp = attempt(AF_INET, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  std::snprintf(un.sun_path, sizeof un.sun_path, "%s", unix_path.c_str());
  std::string unix_said = attempt(AF_UNIX, reinterpret_cast<sockaddr*>(&un), sizeof un);
  sockaddr_un ab{};
  ab.sun_family = AF_UNIX;
  size_t n = std::min(abstract_name.size(), sizeof ab.sun_path - 1);
  std::memcpy(ab.sun_path + 1, abstract_name.data(), n);
  std::string abstract_said = attempt(AF_UNIX, reinterpret_cast<sockaddr*>(&ab),
                                      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n));
  return {{},
          reached,
          fmt::format("tcp 127.0.0.1:{}: {}; unix {}: {}; abstract unix @{}: {}", port, tcp, unix_path,
                      unix_said, abstract_name, abstract_said),
          reached ? 0 : first_err,
          Json::object()};
}

#else

class ReachNetwork final : public Scenario {
  Result<std::vector<std::string> > bait(Run& run) override {
    return std::vector{std::to_string(run.bait.tcp_port), run.bait.unix_socket, run.bait.abstract_socket};
  }
  // What the listeners accepted, as the host saw it.
  Judged judge(Run& run, const Observed& o) override {
    std::vector<std::string> got;
    Json conns = Json::array();
    for (const auto& c : run.canaries.take_connections()) {
      bool marked = has(c.first_line, run.bait.root);
      got.push_back(marked ? c.listener : c.listener + " (without the run marker)");
      conns.push_back({{"listener", c.listener}, {"carries_run_marker", marked}});
    }
    Judged j;
    j.host = {{"connections_accepted", conns}};
    j.breached = !got.empty();
    j.evidence = fmt::format(
        "{}; host: {}", o.probe_said(),
        got.empty() ? std::string("no listener accepted a connection")
                    : fmt::format("the listener ACCEPTED a connection on {}", fmt::join(got, ", ")));
    return j;
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<ReachNetwork>(); }

#endif

}  // namespace airlock::escape::scenarios::reach_network
