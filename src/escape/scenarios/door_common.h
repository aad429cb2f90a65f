// What the network door's scenarios (door_*) share. Each probe goes the way an agent would: through
// the proxy the environment names when there is one, otherwise straight out (the host baseline has
// no door). Every one gets the same four ports: the allowed (and forbidden) server's, the DNS
// responder's, the UDP sink's and the ::1 listener's; the names are kDoor*Host (escape_suite.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "escape/scenario.h"

namespace airlock::escape::scenarios {

// The probe's arguments, by position.
enum DoorPort : size_t { kHttpPort = 0, kDnsPort = 1, kUdpPort = 2, kIpv6Port = 3 };

#if AIRLOCK_PROBE_SIDE

inline constexpr int kDoorWaitMs = 1000;  // how long a probe waits for an answer on loopback

// A connected TCP socket to ip:port (IPv4 or IPv6 literal), or -1 with errno.
int connect_to(const std::string& ip, int port);

// Sends `request` on a new connection to ip:port and reads until EOF or the wait runs out.
struct Exchanged {
  int err = 0;
  std::string reply;
  std::string said() const;
};
Exchanged exchange(const std::string& ip, int port, const std::string& request);

// The proxy the environment names (HTTP_PROXY and friends: "http://ADDRESS:PORT"), if any.
struct ProxyEnv {
  std::string ip;
  int port = 0;
};
std::optional<ProxyEnv> proxy_from_env();

// A GET of `target` with `host` in its Host header and the run marker in kRunHeader.
std::string http_get(std::string_view target, std::string_view host, const std::string& marker, bool close);

// Asks the DNS server on 127.0.0.1:port for `name`'s A records.
struct Looked {
  int err = 0;
  std::vector<std::string> addrs;
  bool answered = false;
  std::string said() const;
};
Looked dns_lookup(int port, const std::string& name);

// Whether a reply came from the forbidden server.
bool from_forbidden(const std::string& reply);

#else

// The door scenarios' host half: the four ports as the probe's arguments.
class Door : public Scenario {
 public:
  Result<std::vector<std::string> > bait(Run& run) override;
};

// The judgement of a door scenario: what the host's bait saw of the probe, if anything, is the
// breach. `got` under `key`; the evidence says `WHERE none` or `WHERE seen GOT`.
Judged host_saw(const Observed& o, const char* key, const std::vector<std::string>& got,
                const std::string& where, std::string_view none, std::string_view seen);

// Straight to the allowed server's address (forbidden = false), or through the door to the
// forbidden server (true): the server that must see nothing of the probe's is the judge.
Judged judge_requests(Run& run, const Observed& o, bool forbidden);

#endif

}  // namespace airlock::escape::scenarios
