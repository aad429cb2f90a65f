// `airlock session --policy FILE`: the action protocol over a pipe, one JSON line each way.
#include <signal.h>

#include <cstdio>
#include <thread>

#include "base/hash.h"
#include "broker/protocol.h"
#include "broker/session.h"
#include "cli/line_reader.h"
#include "cli/store_support.h"
#include "cli/verbs.h"

namespace airlock::cli {
namespace {

// The session verb takes what every one-session verb takes, and the seat it sits in.
struct SessionVerbOptions : SessionCliOptions {
  std::string slot = store::kDefaultSlot;
};

int session_verb(Globals& g, SessionVerbOptions& o) {
  auto start = prepare_session(g, o.defaults, o.policy_file);
  if (!start) return refuse(start.error(), g.json);
  sigset_t mask = block_stop_signals();
  ::signal(SIGPIPE, SIG_IGN);  // a reader that went away is an EOF, not a crash

  // A seat in the slot, as for `airlock run`: released with how the session ended.
  auto held = reserve_seat(g, start->state_dir, o.slot, policy::digest(start->policy));
  if (!held) {
    emit_line({{"id", nullptr}, {"ok", false}, {"error", held.error().to_json()}});
    return refuse(held.error(), false);
  }
  store::Seat& seat = *held->seat;
  broker::SessionOptions so(start->state_dir, start->profile, o.workspace);
  auto session = broker::Session::open(start->policy, start->facts, so);
  if (!session) {
    seat.release(std::string(to_name(session.error().code)));
    emit_line({{"id", nullptr}, {"ok", false}, {"error", session.error().to_json()}});
    return refuse(session.error(), false);
  }
  auto& s = **session;
  (void)seat.record_enforcement(std::string(policy::to_string(s.plan().executor)), s.plan().tier,
                                plan::to_json(start->facts));
  // The first line says what was enforced, before any action is read.
  emit_line({{"id", nullptr},
        {"ok", true},
        {"event", "session.open"},
        {"result",
         {{"session", s.id()},
          {"executor", policy::to_string(s.plan().executor)},
          {"tier", s.plan().tier},
          {"enforced", s.enforced()},
          {"receipts", s.receipts_path()}}}});

  // The reader acts on a "kill" at once (a running tool must not finish first), and on
  // SIGINT/SIGTERM/SIGHUP the same way.
  Inbox inbox;
  std::thread reader = start_line_reader(
      inbox, mask,
      [&](const std::string& line) {
        auto req = parse_json(line, Code::ProtocolError, "the request");
        if (req && broker::request_action(*req) == "kill") (void)s.kill();
      },
      [&] { (void)s.kill("signal"); });

  while (auto line = inbox.pop()) {
    auto req = parse_json(*line, Code::ProtocolError, "the request");
    if (!req) {
      (void)s.note_refusal("protocol.refused", Json{{"line_sha256", sha256_hex(*line)}}, req.error());
      emit_line({{"id", nullptr}, {"ok", false}, {"error", req.error().to_json()}});
      continue;
    }
    emit_line(broker::handle_request(s, *req));
  }
  // End of input without "close": the kill switch's rules, nothing written back.
  // A session closed on request ends "closed"; one killed (by request, signal, budget, or
  // the end of input) ends AIRLOCK_SESSION_KILLED.
  bool closed = s.ended() && !s.killed();
  (void)s.kill("end of input");
  // The reader has returned (EOF or a signal): both close the inbox.
  reader.join();
  seat.release(closed ? "closed" : std::string(to_name(Code::SessionKilled)));
  return 0;
}

}  // namespace

void add_session(CLI::App& app, Globals& g, Action& run) {
  static SessionVerbOptions o;
  auto* cmd = app.add_subcommand(
      "session", "open a broker session and speak the action protocol: JSON lines on stdin and stdout");
  add_session_options(cmd, o);
  cmd->add_option("--slot", o.slot, "the slot whose seat the session takes: NAME or MACHINE:NAME (default: default)");
  cmd->callback([&g, &run] { run = [&g] { return session_verb(g, o); }; });
}

CLI::Option* add_session_options(CLI::App* cmd, SessionCliOptions& o) {
  auto* policy = cmd->add_option("--policy", o.policy_file, "task policy (JSON); the built-in default when absent");
  cmd->add_option("--defaults", o.defaults, "worker default policy");
  cmd->add_option("--workspace", o.workspace, "workspace directory (overrides the policy's)");
  return policy;
}

}  // namespace airlock::cli
