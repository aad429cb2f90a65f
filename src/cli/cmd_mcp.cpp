// `airlock mcp --policy FILE`: an MCP server over stdio (JSON-RPC 2.0, one message per line) over one session.
#include <signal.h>
#include <string.h>

#include <atomic>
#include <deque>
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
  bool elicit_approvals = false;  // ask the client's user to answer held calls (MCP elicitation)
};

// Answers messages from stdin until it ends; a stop signal also ends it when `on_signal` says so.
// While the server waits for the client's answer to a request of its own (elicitation), the
// client's other messages are kept, in order, and answered after.
// `ask_client`: the server may send the client requests of its own (elicitation of an approval).
void serve_stdio(server::McpServer& mcp, broker::Session* s, const sigset_t& mask,
                 const std::function<bool(int)>& on_signal, bool ask_client = false) {
  Inbox inbox;
  std::atomic<bool> stopping = false;
  std::thread reader = start_line_reader(inbox, mask, [](const std::string&) {}, [&](int sig) {
    bool stop = on_signal(sig);
    if (stop) stopping = true;
    return stop;
  });
  std::deque<std::string> kept;
  uint64_t asked = 0;
  // Off unless the operator turns it on (--elicit-approvals): a client that answers elicitation by
  // itself, or hands it to the model, would approve the agent's own calls.
  if (ask_client) mcp.set_client_request([&](const std::string& method, const Json& params) -> Result<Json> {
    std::string id = fmt::format("airlock-{}", ++asked);
    emit_line({{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}});
    while (auto line = inbox.pop()) {
      if (stopping) break;
      auto msg = parse_json(*line, Code::ProtocolError, "the message");
      if (msg && msg->is_object() && !msg->contains("method") && msg->value("id", Json()) == Json(id)) {
        if (msg->contains("result")) return (*msg)["result"];
        return fail(Code::ProtocolError, fmt::format("the client answered {} with an error", method),
                    {{"error", msg->value("error", Json())}});
      }
      kept.push_back(std::move(*line));
    }
    return fail(Code::ProtocolError, fmt::format("the client ended before it answered {}", method));
  });
  auto next = [&]() -> std::optional<std::string> {
    if (!kept.empty()) {
      std::string line = std::move(kept.front());
      kept.pop_front();
      return line;
    }
    return inbox.pop();
  };
  while (auto line = next()) {
    if (stopping) break;  // the client asked the server to end: what it queued is not answered
    auto msg = parse_json(*line, Code::ProtocolError, "the message");
    if (!msg) {
      if (s) (void)s->note_refusal("protocol.refused", Json{{"line_sha256", sha256_hex(*line)}}, msg.error());
      emit_line(server::rpc_error(nullptr, server::kParseError, msg.error().message));
      continue;
    }
    if (auto reply = mcp.handle(*msg)) emit_line(*reply);
  }
  reader.join();
}

// A session that could not open still speaks MCP: the client shows the reason on every call
// instead of a closed connection. Ends with stdin or a stop signal; the exit status says refused.
int serve_unavailable(const Error& why, const sigset_t& mask) {
  (void)refuse(why, false);
  server::McpServer mcp(why);
  serve_stdio(mcp, nullptr, mask, [](int sig) { return sig != SIGUSR1; });
  return kRefusedExit;
}

int mcp_verb(Globals& g, McpOptions& o) {
  // Before any thread starts, so that every signal below reaches the reader's signalfd.
  sigset_t mask = block_stop_signals(true);
  ::signal(SIGPIPE, SIG_IGN);  // a client that went away is an end of input, not a crash
  auto start = prepare_session(g, o.defaults, o.policy_file, false, o.workspace);  // discovery, as for run
  if (!start) return serve_unavailable(start.error(), mask);

  broker::SessionOptions so(start->state_dir, start->profile, o.workspace);
  so.vm_pool = o.vm_pool;
  so.keep_warm = true;  // tool call after tool call: each one's sandbox waits, built
  o.apply(so);
  auto session = broker::Session::open(start->policy, start->facts, so);
  if (!session) return serve_unavailable(session.error(), mask);
  auto& s = **session;
  if (auto listening = s.listen_for_operator_kill(); !listening)
    std::fprintf(stderr, "airlock mcp: `airlock session kill` cannot reach this session: %s\n",
                 listening.error().message.c_str());
  // stdout carries only MCP messages; what a person needs goes to stderr (clients log it).
  std::fprintf(stderr, "airlock mcp: session %s on %s (tier %d), write-back %s, receipts %s\n", s.id().c_str(),
               std::string(policy::to_string(s.plan().executor())).c_str(), s.plan().tier(),
               std::string(policy::to_string(start->policy.write_back)).c_str(), s.receipts_path().c_str());
  server::McpServer mcp(s, start->policy);

  // How MCP clients end a stdio server: close its stdin, then SIGTERM, then SIGKILL. Closing
  // stdin, SIGTERM, SIGHUP and SIGINT are a normal close: a running tool is stopped, the session
  // writes back under the policy's rules and records which signal asked. The kill switch is the
  // operator's (`airlock session kill`, SIGUSR1 with a request in the session's directory) or a
  // spent budget; SIGKILL leaves nothing written back and the next start sweeps the view.
  broker::CloseCause cause{"end of input", ""};
  serve_stdio(mcp, &s, mask, [&](int sig) {
    if (sig == SIGUSR1) {
      auto who = s.operator_kill_requested();
      if (!who) return false;  // a SIGUSR1 nobody asked for through the session's directory
      (void)s.kill(*who);
      return true;
    }
    cause = {"signal", std::string("SIG") + ::sigabbrev_np(sig)};
    s.interrupt();
    return true;
  }, o.elicit_approvals);
  (void)s.enforce_budget();  // a budget spent while the client idled is the kill switch too
  if (s.ended()) {            // killed by the operator or a spent budget: session.close says so
    std::fprintf(stderr, "airlock mcp: session killed; nothing more written back\n");
    return 0;
  }
  auto closed = s.close(true, cause);
  if (!closed) return refuse(closed.error(), false);
  std::fprintf(stderr, "airlock mcp: closed (%s%s%s); written back: %s\n", cause.reason.c_str(),
               cause.signal.empty() ? "" : " ", cause.signal.c_str(),
               closed->to_json().dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
  return 0;
}

}  // namespace

void add_mcp(CLI::App& app, Globals& g, Action& run) {
  static McpOptions o;
  auto* cmd = app.add_subcommand("mcp", "an MCP server over stdio: one session's actions as tools");
  add_session_options(cmd, o, PolicyOption::Required);
  cmd->add_option("--vm-pool", o.vm_pool,
                  "on the microvm tier, keep N guests booted ahead, each used for one tool call (default 0: off)")
      ->check(CLI::Range(0, 16));
  cmd->add_flag("--elicit-approvals", o.elicit_approvals,
                "ask the client's user to approve a call held for approval (MCP elicitation, when the client "
                "offers it); the client's answer is taken as the user's: use only with a client that asks its user");
  cmd->callback([&g, &run] { run = [&g] { return mcp_verb(g, o); }; });
}

}  // namespace airlock::cli
