// `airlock session --policy FILE`: the action protocol over a pipe, one JSON line each way.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "base/encoding.h"
#include "base/fs.h"
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
  std::string summary_file;  // --summary-file: the session's id from its open, its end once ended
  std::string machine;       // --machine: the session is opened on that machine of the fleet
};

int session_verb(Globals& g, SessionVerbOptions& o) {
  if (!o.machine.empty()) {
    if (o.run_id || o.credentials_command || !o.summary_file.empty())
      return refuse(Error{Code::OptionInvalid,
                          "--machine takes --policy, --defaults, --workspace and --slot; --run-id, "
                          "--credentials-command and --summary-file are not sent to another machine",
                          {{"machine", o.machine}}},
                    false);
    RunOptions r;
    r.policy_file = o.policy_file;
    r.defaults = o.defaults;
    r.workspace = o.workspace;
    r.slot = o.slot;
    return session_on_machine_cli(g, r, o.machine);
  }
  // Discovery as for `run`, from the workspace when one is given.
  auto start = prepare_session(g, o.defaults, o.policy_file, false, o.workspace);
  if (!start) return refuse(start.error(), g.json);
  sigset_t mask = block_stop_signals(true);
  ::signal(SIGPIPE, SIG_IGN);  // a reader that went away is an EOF, not a crash

  // A seat in the slot, as for `airlock run`: released with how the session ended.
  auto held = reserve_seat(g, start->state_dir, o.slot, policy::digest(start->policy));
  if (!held) {
    emit_line({{"id", nullptr}, {"ok", false}, {"error", held.error().to_json()}});
    return refuse(held.error(), false);
  }
  store::Seat& seat = *held->seat;
  broker::SessionOptions so(start->state_dir, start->profile, o.workspace);
  so.keep_warm = true;  // request after request: each command's sandbox waits, built
  o.apply(so);
  auto session = broker::Session::open(start->policy, start->facts, so);
  if (!session) {
    seat.release(std::string(to_name(session.error().code)));
    emit_line({{"id", nullptr}, {"ok", false}, {"error", session.error().to_json()}});
    return refuse(session.error(), false);
  }
  auto& s = **session;
  // The summary file names the session from its open, and says how it ended once it has (a
  // reader, `session --machine`, tells a session killed before its end by the missing outcome).
  auto summary = [&](Json outcome) {
    if (o.summary_file.empty()) return Result<void>{};
    Json j = {{"session", s.id()}, {"receipts", s.receipts_path()}};
    if (!outcome.is_null()) j["outcome"] = std::move(outcome);
    return write_file_atomic(o.summary_file, j.dump() + "\n", 0600);
  };
  if (auto w = summary(nullptr); !w) {
    (void)s.kill("the summary file could not be written");
    seat.release(std::string(to_name(w.error().code)));
    emit_line({{"id", nullptr}, {"ok", false}, {"error", w.error().to_json()}});
    return refuse(w.error(), false);
  }
  (void)s.listen_for_operator_kill();
  (void)seat.record_enforcement(std::string(policy::to_string(s.plan().executor())), s.plan().tier(), s.plan().why,
                                plan::to_json(start->facts));
  // The first line says what was enforced, before any action is read.
  emit_line({{"id", nullptr},
        {"ok", true},
        {"event", "session.open"},
        {"result",
         {{"session", s.id()},
          {"executor", policy::to_string(s.plan().executor())},
          {"tier", s.plan().tier()},
          {"enforced", exec::to_json(s.enforced())},
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
      [&](int sig) {
        if (sig == SIGUSR1) {  // `airlock session kill ID`, or a stray SIGUSR1 that asked for nothing
          auto who = s.operator_kill_requested();
          if (who) (void)s.kill(*who);
          return who.has_value();
        }
        (void)s.kill("signal");
        return true;
      });

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
  std::string ended = closed ? "closed" : std::string(to_name(Code::SessionKilled));
  if (auto w = summary({{"ended", ended}}); !w)
    std::fprintf(stderr, "airlock: the summary could not be written: %s\n", escape_for_terminal(w.error().message).c_str());
  seat.release(ended);
  return 0;
}

// `airlock session kill ID`: the operator's kill switch for a session another airlock process
// runs (`airlock mcp`, `airlock session`): waits until the session has ended.
Result<int> kill_verb(Globals& g, const std::string& id) {
  std::string state = TRY(resolve_state_dir(g.state_dir));
  std::string who = fmt::format("operator kill (airlock session kill, uid {})", ::getuid());
  pid_t pid = TRY(broker::request_operator_kill(state, id, who));
  // The owner removes the session's directory when session.close is written.
  std::string root = state + "/sessions/" + id;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  struct stat st{};
  while (::lstat(root.c_str(), &st) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  bool ended = ::lstat(root.c_str(), &st) < 0;
  if (g.json)
    std::printf("%s\n", Json{{"session", id}, {"pid", pid}, {"killed", ended}}.dump().c_str());
  else
    std::printf("session %s (pid %d): %s\n", id.c_str(), pid,
                ended ? "killed; nothing more is written back" : "kill requested; the session has not ended yet");
  return ended ? 0 : 1;
}

}  // namespace

void add_session(CLI::App& app, Globals& g, Action& run) {
  static SessionVerbOptions o;
  static std::string kill_id;
  auto* cmd = app.add_subcommand(
      "session", "open a broker session and speak the action protocol: JSON lines on stdin and stdout");
  add_session_options(cmd, o, PolicyOption::Optional);
  cmd->add_option("--slot", o.slot, "the slot whose seat the session takes: NAME or MACHINE:NAME (default: default)");
  cmd->add_option("--summary-file", o.summary_file,
                  "write the session's id here once it is open, and how it ended once it has (JSON)");
  cmd->add_option("--machine", o.machine,
                  "open the session on this machine of the fleet (`airlock machine add`), over ssh; --workspace is a "
                  "path there");
  auto* kill = cmd->add_subcommand(
      "kill", "the kill switch for a running `airlock mcp` or `airlock session` by its id: nothing more is written back");
  kill->add_option("id", kill_id, "the session's id (its receipts file's name)")->required();
  kill->callback([&g, &run] {
    run = [&g] {
      auto r = kill_verb(g, kill_id);
      return r ? *r : refuse(r.error(), g.json);
    };
  });
  // CLI11 runs a subcommand's callback before its parent's: `session kill` keeps its action.
  cmd->callback([&g, &run, kill] {
    if (kill->parsed()) return;
    run = [&g] { return session_verb(g, o); };
  });
}

void add_session_options(CLI::App* cmd, SessionCliOptions& o, PolicyOption policy) {
  // One text per case, so the help never says both "required" and "when absent".
  if (policy == PolicyOption::Required)
    cmd->add_option("--policy", o.policy_file, "task policy (JSON), layered over --defaults and the built-in default")
        ->required();
  else
    cmd->add_option("--policy", o.policy_file, "task policy (JSON); the built-in default when absent");
  cmd->add_option("--defaults", o.defaults, "worker default policy");
  cmd->add_option("--workspace", o.workspace, "workspace directory (overrides the policy's)");
  cmd->add_option("--run-id", o.run_id,
                  "the run its json-protocol tool calls belong to: an earlier run's id resumes it (same keys, same "
                  "effect ledger); default: the session's own id");
  cmd->add_option("--credentials-command", o.credentials_command,
                  "host command run per json-protocol dispatch; its stdout is handed to the tool as fresh credentials");
  cmd->add_flag("--credentials-env", o.credentials_env,
                "hand credentials as AIRLOCK_CREDENTIALS instead of the pipe on descriptor 3");
}

void SessionCliOptions::apply(broker::SessionOptions& so) const {
  so.run_id = run_id;
  if (credentials_command)
    so.credentials = exec::credentials_from_command(
        *credentials_command, credentials_env ? exec::CredentialDelivery::Env : exec::CredentialDelivery::Pipe);
}

}  // namespace airlock::cli
