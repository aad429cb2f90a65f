// Fuzz target: the receipt verifier (any file bytes), and the writer's promise that any body bytes
// are recorded, verify, and give their exact bytes back.
#include <unistd.h>

#include "base/encoding.h"
#include "fuzz_support.h"
#include "ledger/receipts.h"

using namespace airlock;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes = fuzz::as_text(data, size);
  const std::string file = fuzz::scratch_dir() + "/receipts.jsonl";
  // 1. Whatever a receipts file holds, verify_chain answers with a value.
  if (!write_file_atomic(file, bytes)) std::abort();
  auto chain = ledger::verify_chain(file);
  if (!chain) fuzz::check_serialisable(chain.error().to_json());
  (void)::unlink(file.c_str());

  // 2. The input as a string and as a key in a receipt body: written, verified, exact.
  auto log = ledger::ReceiptLog::create(file, "fuzz");
  FUZZ_CHECK(log.has_value(), "the receipt log opens");
  Json body = {{"path", std::string(bytes)}, {"headers", {{std::string(bytes), "v"}}}};
  auto r = log->append("fuzz", body);
  FUZZ_CHECK(r.has_value(), "a receipt is never refused for its bytes");
  auto verified = ledger::verify_chain(file);
  FUZZ_CHECK(verified.has_value() && verified->receipts == 1, "the written receipt verifies");
  if (!is_valid_utf8(bytes)) {
    bool found = false;
    for (const Json& e : (*r)[std::string(ledger::kNotUtf8Key)])
      if (e["pointer"] == "/path")
        found = base64_decode(e["base64"].get<std::string>()) == std::string(bytes);
    FUZZ_CHECK(found, "the exact bytes are beside the lossy string");
  } else {
    FUZZ_CHECK((*r)["path"] == std::string(bytes), "valid UTF-8 is kept as is");
  }
  (void)::unlink(file.c_str());
  return 0;
}
