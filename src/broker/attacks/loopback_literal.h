// What the two literal attacks share (decimal_ipv4_literal_of_loopback,
// ipv4_mapped_ipv6_literal_of_loopback): a URL whose host is a literal of 127.0.0.1 in another
// spelling, on the port only the wildcard rule admits.
#pragma once

#include "broker/attack.h"

namespace airlock::broker::attacks {

inline Result<AttackResult> fetch_loopback_literal(AttackContext& c, const std::string& url) {
  const std::string denied(to_name(Code::EgressDenied));
  auto r = c.session.http_fetch({"GET", url, {}, {}});
  auto b = plain_fetch(url, {}, false);
  return AttackResult{.expected = denied,
                      .broker = answer(r),
                      .contained = answer(r) == denied,
                      .baseline_breached = b.ok && b.body == "good",
                      .detail = why(r),
                      .baseline_detail = "libcurl reached the loopback server"};
}

}  // namespace airlock::broker::attacks
