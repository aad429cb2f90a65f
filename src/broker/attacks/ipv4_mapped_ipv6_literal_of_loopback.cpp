// ipv4_mapped_ipv6_literal_of_loopback: 127.0.0.1 spelt as an IPv4-mapped IPv6 address.
#include "broker/attacks/loopback_literal.h"

namespace airlock::broker::attacks::ipv4_mapped_ipv6_literal_of_loopback {

Result<AttackResult> run(AttackContext& c) {
  return fetch_loopback_literal(c, fmt::format("http://[::ffff:127.0.0.1]:{}/", c.servers.any_port));
}

}  // namespace airlock::broker::attacks::ipv4_mapped_ipv6_literal_of_loopback
