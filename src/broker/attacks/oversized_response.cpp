// oversized_response: a response larger than the policy's max_response_bytes.
#include "broker/attack.h"

namespace airlock::broker::attacks::oversized_response {

Result<AttackResult> run(AttackContext& c) {
  const std::string limit(to_name(Code::LimitExceeded));
  const int port = c.servers.port;
  auto r = c.session.http_fetch({"GET", fmt::format("http://allowed.test:{}/big", port), {}, {}});
  auto b = plain_fetch(fmt::format("http://allowed.test:{}/big", port),
                       {fmt::format("allowed.test:{}:127.0.0.1", port)}, false);
  return AttackResult{.expected = limit,
                      .broker = answer(r),
                      .contained = answer(r) == limit,
                      .baseline_breached = b.body.size() > 65536,
                      .detail = why(r),
                      .baseline_detail = fmt::format("libcurl took all {} bytes", b.body.size())};
}

}  // namespace airlock::broker::attacks::oversized_response
