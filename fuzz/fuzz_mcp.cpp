// Fuzz target: the MCP JSON-RPC layer (`airlock mcp`) over a live broker session.
#include "server/mcp.h"
#include "session_harness.h"

using namespace airlock;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::SessionHarness& harness = fuzz::session_harness();
  std::string_view text = fuzz::as_text(data, size);
  fuzz::for_each_line(text, [&](std::string_view line) {
    broker::Session& s = harness.session();
    auto msg = parse_json(line, Code::ProtocolError, "the message");
    if (!msg) {
      (void)canonical_json(server::rpc_error(nullptr, server::kParseError, msg.error().message));
      return;
    }
    server::McpServer mcp(s, harness.policy());
    // emit_line writes replies lossy where a name from the view is not UTF-8; nothing may throw.
    if (auto reply = mcp.handle(*msg)) (void)reply->dump(-1, ' ', false, Json::error_handler_t::replace);
  });
  return 0;
}
