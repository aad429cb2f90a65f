// Fuzz target: the effect ledger scanner (strict and tolerant), and the writer with hostile strings.
#include <unistd.h>

#include "base/encoding.h"
#include "fuzz_support.h"
#include "ledger/effect_ledger.h"

using namespace airlock;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes = fuzz::as_text(data, size);
  for (bool tolerant : {false, true}) {
    auto scan = ledger::scan_ledger_bytes(bytes, tolerant);
    // Everything a scan returns came from parsed JSON or is ours: strict serialisation holds.
    if (scan)
      (void)canonical_json(scan->to_json());
    else
      fuzz::check_serialisable(scan.error().to_json());
  }
  // A dispatch whose tool name and error message are the input is recorded and scans back.
  const std::string file = fuzz::scratch_dir() + "/effects.jsonl";
  {
    auto led = ledger::EffectLedger::open(file);
    FUZZ_CHECK(led.has_value(), "the ledger opens");
    EffectIntent i{"a1", "ik2-k", std::string(bytes), std::string(64, '0'), "run", "span", "/w", 1};
    EffectOutcome o{"a1", "ik2-k", false, Error{Code::ToolFailed, std::string(bytes), {}}, 2, 1};
    FUZZ_CHECK(led->append_intent(i).has_value(), "an intent is never refused for its bytes");
    FUZZ_CHECK(led->append_outcome(o).has_value(), "an outcome is never refused for its bytes");
  }
  auto back = ledger::scan_ledger(file);
  FUZZ_CHECK(back.has_value() && back->rows.size() == 1, "the records scan back");
  FUZZ_CHECK(back->rows[0].intent.tool == lossy_utf8(bytes), "the tool name reads back (lossy at worst)");
  (void)::unlink(file.c_str());
  (void)::unlink((file + ".repair-lock").c_str());
  return 0;
}
