// Fuzz target: the network door's request and response head parsing and body framing.
#include "egress/door.h"
#include "fuzz_support.h"

using namespace airlock;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = fuzz::as_text(data, size);
  auto head = egress::parse_proxy_head(text);
  if (!head) return 0;
  for (bool is_request : {true, false}) {
    egress::Framing f = egress::body_framing(*head, is_request);
    FUZZ_CHECK(f.kind != egress::Framing::Length || f.length < 1000000000000000000ull,
               "a length has 18 digits at most");
  }
  for (const auto& [name, value] : head->fields) {
    FUZZ_CHECK(!name.empty() && name.find_first_of(" \t") == std::string::npos, "a field name is one token");
    FUZZ_CHECK(head->has(name), "a field read is found again");
  }
  // What the door records of a request is the sandbox's bytes: a receipt body must take them.
  Json receipt = {{"method", head->first}, {"target", head->first}, {"host", head->get("host")}};
  fuzz::check_serialisable(std::move(receipt));
  return 0;
}
