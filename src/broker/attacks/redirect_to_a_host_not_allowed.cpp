// redirect_to_a_host_not_allowed: an allowed server redirects to one that is not: the redirect
// must come back to the caller, never be followed.
#include "broker/attack.h"

namespace airlock::broker::attacks::redirect_to_a_host_not_allowed {

Result<AttackResult> run(AttackContext& c) {
  const int port = c.servers.port;
  int evil_before = c.servers.evil_hits;
  auto r = c.session.http_fetch({"GET", fmt::format("http://allowed.test:{}/redirect", port), {}, {}});
  bool returned = r && r->status / 100 == 3 && !r->redirect_to.empty() && c.servers.evil_hits == evil_before;
  auto b = plain_fetch(
      fmt::format("http://allowed.test:{}/redirect", port),
      {fmt::format("allowed.test:{}:127.0.0.1", port), fmt::format("evil.test:{}:127.0.0.2", port)}, true);
  return AttackResult{
      .expected = "not followed",
      .broker = answer(r),
      .contained = returned,
      .baseline_breached = b.ok && b.body == "evil",
      .detail = r ? fmt::format("{} returned with Location {}", r->status, r->redirect_to) : why(r),
      .baseline_detail = "libcurl followed the redirect to evil.test"};
}

}  // namespace airlock::broker::attacks::redirect_to_a_host_not_allowed
