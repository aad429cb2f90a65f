// Fuzz target: the pipe protocol (`airlock session`): each input line is parsed as the verb parses
// it and handled by a live broker session; every response must serialise.
#include "broker/protocol.h"
#include "session_harness.h"

using namespace airlock;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::SessionHarness& harness = fuzz::session_harness();
  std::string_view text = fuzz::as_text(data, size);
  fuzz::for_each_line(text, [&](std::string_view line) {
    broker::Session& s = harness.session();
    auto req = parse_json(line, Code::ProtocolError, "the request");
    if (!req) {
      (void)s.note_refusal("protocol.refused", Json{{"line_bytes", line.size()}}, req.error());
      fuzz::check_serialisable(req.error().to_json());
      return;
    }
    // The response is repaired by the adapter: strict serialisation must hold as it is.
    (void)canonical_json(broker::handle_request(s, *req));
  });
  return 0;
}
