// decimal_ipv4_literal_of_loopback: 127.0.0.1 spelt as one decimal number (2130706433).
#include "broker/attacks/loopback_literal.h"

namespace airlock::broker::attacks::decimal_ipv4_literal_of_loopback {

Result<AttackResult> run(AttackContext& c) {
  return fetch_loopback_literal(c, fmt::format("http://2130706433:{}/", c.servers.any_port));
}

}  // namespace airlock::broker::attacks::decimal_ipv4_literal_of_loopback
