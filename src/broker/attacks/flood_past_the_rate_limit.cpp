// flood_past_the_rate_limit: eleven actions in a session of its own that allows ten a minute.
#include "broker/attack.h"

namespace airlock::broker::attacks::flood_past_the_rate_limit {

Result<AttackResult> run(AttackContext& c) {
  const std::string code(to_name(Code::RateLimited));
  auto flood = TRY(c.open_session(10));
  std::string last = "allowed";
  int admitted = 0;
  for (int i = 0; i < 11; ++i) {
    auto r = flood->read_file("ok.txt");
    last = answer(r);
    if (r) ++admitted;
  }
  int plain_ok = 0;
  for (int i = 0; i < 11; ++i) plain_ok += plain_read(c.ws + "/ok.txt") == "ordinary\n";
  (void)flood->close(false);
  return AttackResult{.expected = code,
                      .broker = last,
                      .contained = last == code && admitted == 10,
                      .baseline_breached = plain_ok == 11,
                      .detail = fmt::format("{} of 11 admitted at 10 per minute", admitted),
                      .baseline_detail = "open(2) read 11 times"};
}

}  // namespace airlock::broker::attacks::flood_past_the_rate_limit
