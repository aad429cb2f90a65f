// Fuzz target: the DNS wire format (the escape suite's responder and the door's DNS probes).
#include "escape/dns_wire.h"
#include "fuzz_support.h"

using namespace airlock;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view msg = fuzz::as_text(data, size);
  uint16_t id = size >= 2 ? static_cast<uint16_t>(data[0] << 8 | data[1]) : 0;
  (void)escape::parse_dns_answer(msg, id);
  auto q = escape::parse_dns_question(msg);
  if (!q) return 0;
  // The answer the responder makes to any question it parsed is one the prober reads back.
  const std::vector<std::string> addrs = {"127.0.0.1", "10.1.2.3"};
  auto back = escape::parse_dns_answer(escape::encode_dns_answer(*q, addrs), q->id);
  if (q->qtype == 1) FUZZ_CHECK(back && *back == addrs, "an A answer reads back its addresses");
  auto query = escape::parse_dns_question(escape::encode_dns_query(q->id, q->name));
  FUZZ_CHECK(query && query->name == q->name, "a query for a parsed name parses to that name");
  return 0;
}
