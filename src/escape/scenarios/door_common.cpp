// The door scenarios' shared probe helpers and judges (door_common.h).
#include "escape/scenarios/door_common.h"

#include <arpa/inet.h>
#include <fmt/ranges.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "escape/dns_wire.h"

namespace airlock::escape::scenarios {

#if AIRLOCK_PROBE_SIDE

int connect_to(const std::string& ip, int port) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family = AF_INET;
  if (ip.find(':') != std::string::npos) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET6, ip.c_str(), &a->sin6_addr) != 1) return errno = EINVAL, -1;
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET, ip.c_str(), &a->sin_addr) != 1) return errno = EINVAL, -1;
    len = sizeof *a;
  }
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{kDoorWaitMs / 1000, (kDoorWaitMs % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) < 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

std::string Exchanged::said() const {
  if (err) return "connect: " + err_name(err);
  return reply.empty() ? std::string("no answer") : "\"" + printable(reply, 300) + "\"";
}

Exchanged exchange(const std::string& ip, int port, const std::string& request) {
  int fd = connect_to(ip, port);
  if (fd < 0) return {errno, {}};
  write_all(fd, request);
  Exchanged x;
  char buf[4096];
  for (ssize_t n; x.reply.size() < 64 * 1024 && (n = ::read(fd, buf, sizeof buf)) > 0;)
    x.reply.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return x;
}

std::optional<ProxyEnv> proxy_from_env() {
  for (const char* name : {"http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"}) {
    const char* v = ::getenv(name);
    if (!v) continue;
    std::string url = v;
    if (url.rfind("http://", 0) == 0) url = url.substr(7);
    while (!url.empty() && url.back() == '/') url.pop_back();
    auto colon = url.rfind(':');
    if (colon == std::string::npos) continue;
    return ProxyEnv{url.substr(0, colon), std::atoi(url.c_str() + colon + 1)};
  }
  return std::nullopt;
}

std::string http_get(std::string_view target, std::string_view host, const std::string& marker, bool close) {
  return fmt::format("GET {} HTTP/1.1\r\nHost: {}\r\n{}: {}\r\n{}\r\n", target, host, kRunHeader, marker,
                     close ? "Connection: close\r\n" : "");
}

std::string Looked::said() const {
  if (err) return err_name(err);
  if (!answered) return "no answer";
  return addrs.empty() ? std::string("answered: no address")
                       : fmt::format("answered {}", fmt::join(addrs, ", "));
}

Looked dns_lookup(int port, const std::string& name) {
  Looked l;
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {errno, {}, false};
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  auto id = static_cast<uint16_t>(::getpid() ^ port);
  std::string q = encode_dns_query(id, name);
  if (::sendto(fd, q.data(), q.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to) < 0) {
    l.err = errno;
  } else {
    pollfd p{fd, POLLIN, 0};
    char buf[512];
    if (::poll(&p, 1, kDoorWaitMs) == 1) {
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0) l.err = errno;
      auto a = n > 0 ? parse_dns_answer(std::string_view(buf, static_cast<size_t>(n)), id) : std::nullopt;
      if (a) {
        l.answered = true;
        l.addrs = *a;
      }
    }
  }
  ::close(fd);
  return l;
}

bool from_forbidden(const std::string& reply) {
  return reply.find(fmt::format("hello from {}", kDoorForbiddenHost)) != std::string::npos;
}

#else

Result<std::vector<std::string> > Door::bait(Run& run) {
  const DoorBait& d = run.bait.door;
  return std::vector{std::to_string(d.http_port), std::to_string(d.dns_port), std::to_string(d.udp_port),
                     std::to_string(d.ipv6_port)};
}

Judged host_saw(const Observed& o, const char* key, const std::vector<std::string>& got,
                const std::string& where, std::string_view none, std::string_view seen) {
  Judged j;
  j.host = {{key, got}};
  j.breached = !got.empty();
  j.evidence =
      fmt::format("{}; host: {} {}", o.probe_said(), where,
                  got.empty() ? std::string(none) : fmt::format("{} {}", seen, fmt::join(got, ", ")));
  return j;
}

Judged judge_requests(Run& run, const Observed& o, bool forbidden) {
  std::vector<std::string> got;
  for (const auto& r : run.canaries.take_requests(forbidden)) {
    // The allowed server may be reached through the door; only what went around it counts there
    // (the probe asks for /direct...). Anything at the forbidden server counts.
    if (!forbidden && r.path.rfind("/direct", 0) != 0) continue;
    got.push_back(r.header(kRunHeader) == run.bait.root ? r.path : r.path + " (without the run marker)");
  }
  return host_saw(o, forbidden ? "forbidden_server_requests" : "allowed_server_direct_requests", got,
                  fmt::format("the {} server (127.0.0.{}:{})", forbidden ? "forbidden" : "allowed",
                              forbidden ? 2 : 1, run.bait.door.http_port),
                  "answered no request of the probe's", "ANSWERED");
}

#endif

}  // namespace airlock::escape::scenarios
