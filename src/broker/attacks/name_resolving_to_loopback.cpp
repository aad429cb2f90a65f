// name_resolving_to_loopback: fetch from a name the wildcard rule admits, which resolves to loopback.
#include "broker/attack.h"

namespace airlock::broker::attacks::name_resolving_to_loopback {

Result<AttackResult> run(AttackContext& c) {
  const std::string denied(to_name(Code::EgressDenied));
  const int any = c.servers.any_port;
  int before = c.servers.any_hits;
  auto r = c.session.http_fetch({"GET", fmt::format("http://loopback.test:{}/", any), {}, {}});
  bool untouched = c.servers.any_hits == before;
  auto b = plain_fetch(fmt::format("http://loopback.test:{}/", any),
                       {fmt::format("loopback.test:{}:127.0.0.1", any)}, false);
  return AttackResult{.expected = denied,
                      .broker = answer(r),
                      .contained = answer(r) == denied && untouched,
                      .baseline_breached = b.ok && b.body == "good",
                      .detail = why(r),
                      .baseline_detail = "libcurl connected to the loopback server"};
}

}  // namespace airlock::broker::attacks::name_resolving_to_loopback
