// dns_answer_changes_between_lookups: a name that answers an allowed address, then a forbidden
// one: the fetch must connect to the address it checked.
#include "broker/attack.h"

namespace airlock::broker::attacks::dns_answer_changes_between_lookups {

Result<AttackResult> run(AttackContext& c) {
  const int port = c.servers.port;
  c.rebind_calls = 0;
  int evil_before = c.servers.evil_hits;
  auto r = c.session.http_fetch({"GET", fmt::format("http://rebind.test:{}/", port), {}, {}});
  bool pinned = r && r->body == "good" && c.servers.evil_hits == evil_before;
  // The baseline checks the first answer (127.0.0.1, inside the CIDR rule), then connects by
  // name, and the name now answers 127.0.0.2.
  c.rebind_calls = 0;
  auto first = c.resolver("rebind.test");
  auto second = c.resolver("rebind.test");
  int evil_mid = c.servers.evil_hits;
  auto b = plain_fetch(fmt::format("http://rebind.test:{}/", port),
                       {fmt::format("rebind.test:{}:{}", port, (*second)[0].to_string())}, false);
  (void)first;
  return AttackResult{.expected = "pinned",
                      .broker = answer(r),
                      .contained = pinned,
                      .baseline_breached = b.ok && c.servers.evil_hits > evil_mid,
                      .detail = r ? fmt::format("fetched from {}", r->pinned_address) : why(r),
                      .baseline_detail = "checked 127.0.0.1, then connected to 127.0.0.2"};
}

}  // namespace airlock::broker::attacks::dns_answer_changes_between_lookups
