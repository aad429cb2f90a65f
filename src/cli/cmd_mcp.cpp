// `airlock mcp --policy FILE`: an MCP server over stdio (JSON-RPC 2.0, one message per line) over one session.
#include <signal.h>

#include <cstdio>
#include <thread>

#include "base/hash.h"
#include "broker/session.h"
#include "cli/line_reader.h"
#include "cli/verbs.h"
#include "server/mcp.h"

namespace airlock::cli {
namespace {

struct McpOptions : SessionCliOptions {
  size_t vm_pool = 0;
};

int mcp_verb(Globals& g, McpOptions& o) {
  auto start = prepare_session(g, o.defaults, o.policy_file);
  if (!start) return refuse(start.error(), false);
  sigset_t mask = block_stop_signals();
  ::signal(SIGPIPE, SIG_IGN);  // a client that went away is an end of input, not a crash

  broker::SessionOptions so(start->state_dir, start->profile, o.workspace);
  so.vm_pool = o.vm_pool;
  auto session = broker::Session::open(start->policy, start->facts, so);
  if (!session) return refuse(session.error(), false);
  auto& s = **session;
  // stdout carries only MCP messages; what a person needs goes to stderr (clients log it).
  std::fprintf(stderr, "airlock mcp: session %s on %s (tier %d), receipts %s\n", s.id().c_str(),
               std::string(policy::to_string(s.plan().executor)).c_str(), s.plan().tier, s.receipts_path().c_str());
  server::McpServer mcp(s, start->policy);

  // A stop signal is the kill switch, even while a tool runs: nothing is written back.
  Inbox inbox;
  std::thread reader = start_line_reader(inbox, mask, [](const std::string&) {}, [&] { (void)s.kill("signal"); });
  while (auto line = inbox.pop()) {
    auto msg = parse_json(*line, Code::ProtocolError, "the message");
    if (!msg) {
      (void)s.note_refusal("protocol.refused", Json{{"line_sha256", sha256_hex(*line)}}, msg.error());
      emit_line(server::rpc_error(nullptr, server::kParseError, msg.error().message));
      continue;
    }
    if (auto reply = mcp.handle(*msg)) emit_line(*reply);
  }
  reader.join();
  // End of input is the client closing: the session closes and writes back (a signal killed it instead).
  if (!s.killed()) {
    auto closed = s.close(true);
    if (!closed) return refuse(closed.error(), false);
    std::fprintf(stderr, "airlock mcp: closed; written back: %s\n", closed->to_json().dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
  }
  return 0;
}

}  // namespace

void add_mcp(CLI::App& app, Globals& g, Action& run) {
  static McpOptions o;
  auto* cmd = app.add_subcommand("mcp", "an MCP server over stdio: one session's actions as tools");
  add_session_options(cmd, o)->required();
  cmd->add_option("--vm-pool", o.vm_pool,
                  "on the microvm tier, keep N guests booted ahead, each used for one tool call (default 0: off)")
      ->check(CLI::Range(0, 16));
  cmd->callback([&g, &run] { run = [&g] { return mcp_verb(g, o); }; });
}

}  // namespace airlock::cli
