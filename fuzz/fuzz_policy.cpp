// Fuzz target: the task policy parser (policy files, --defaults, POST /v1/sessions bodies).
#include "fuzz_support.h"
#include "policy/task_policy.h"

using namespace airlock;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const policy::TaskPolicy base = policy::builtin_default();
  std::string_view text = fuzz::as_text(data, size);
  for (bool worker : {false, true}) {
    auto p = policy::parse_layer_text(text, base, "fuzz.json", worker);
    if (!p) {
      fuzz::check_serialisable(p.error().to_json());
      continue;
    }
    // A parsed policy serialises (it is recorded in every receipt), and reads back the same.
    std::string again = canonical_json(policy::to_json(*p));
    auto q = policy::parse_layer_text(again, base, "again.json", /*worker_layer=*/true);
    FUZZ_CHECK(q.has_value(), "a parsed policy's JSON parses again");
    FUZZ_CHECK(policy::digest(*q) == policy::digest(*p), "a parsed policy reads back the same");
  }
  return 0;
}
