// `airlock session --policy FILE`: the action protocol over a pipe, one JSON line each way.
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <iostream>
#include <mutex>
#include <thread>

#include "base/hash.h"
#include "base/unique_fd.h"
#include "broker/protocol.h"
#include "broker/session.h"
#include "cli/store_support.h"
#include "cli/verbs.h"

namespace airlock::cli {
namespace {

struct SessionCliOptions {
  std::optional<std::string> policy_file, defaults, workspace;
  std::string slot = store::kDefaultSlot;
};

// Lines from stdin, handed to the main thread in order. The reader acts on a "kill" at once
// (a running tool must not finish first) and on SIGINT/SIGTERM/SIGHUP the same way.
class Inbox {
 public:
  void push(std::string line) {
    std::lock_guard lk(mu_);
    lines_.push_back(std::move(line));
    cv_.notify_one();
  }
  void close() {
    std::lock_guard lk(mu_);
    closed_ = true;
    cv_.notify_one();
  }
  std::optional<std::string> pop() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return !lines_.empty() || closed_; });
    if (lines_.empty()) return std::nullopt;
    std::string l = std::move(lines_.front());
    lines_.pop_front();
    return l;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> lines_;
  bool closed_ = false;
};

void emit(const Json& j) {
  std::string line = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

int session_verb(Globals& g, SessionCliOptions& o) {
  auto start = prepare_session(g, o.defaults, o.policy_file);
  if (!start) return refuse(start.error(), g.json);
  sigset_t mask = block_stop_signals();
  ::signal(SIGPIPE, SIG_IGN);  // a reader that went away is an EOF, not a crash

  // A seat in the slot, as for `airlock run`: released with how the session ended.
  auto held = reserve_seat(g, start->state_dir, o.slot, policy::digest(start->policy));
  if (!held) {
    emit({{"id", nullptr}, {"ok", false}, {"error", held.error().to_json()}});
    return refuse(held.error(), false);
  }
  store::Seat& seat = *held->seat;
  broker::SessionOptions so(start->state_dir, start->profile, o.workspace);
  auto session = broker::Session::open(start->policy, start->facts, so);
  if (!session) {
    seat.release(std::string(to_name(session.error().code)));
    emit({{"id", nullptr}, {"ok", false}, {"error", session.error().to_json()}});
    return refuse(session.error(), false);
  }
  auto& s = **session;
  (void)seat.record_enforcement(std::string(policy::to_string(s.plan().executor)), s.plan().tier,
                                plan::to_json(start->facts));
  // The first line says what was enforced, before any action is read.
  emit({{"id", nullptr},
        {"ok", true},
        {"event", "session.open"},
        {"result",
         {{"session", s.id()},
          {"executor", policy::to_string(s.plan().executor)},
          {"tier", s.plan().tier},
          {"enforced", s.enforced()},
          {"receipts", s.receipts_path()}}}});

  Inbox inbox;
  UniqueFd sigfd(::signalfd(-1, &mask, SFD_CLOEXEC));
  std::thread reader([&] {
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {sigfd.get(), POLLIN, 0}};
    std::string buf;
    char chunk[65536];
    for (;;) {
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (fds[1].revents & POLLIN) {
        signalfd_siginfo si{};
        (void)!::read(sigfd.get(), &si, sizeof si);
        (void)s.kill("signal");
        break;
      }
      if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      buf.append(chunk, static_cast<size_t>(n));
      size_t nl;
      while ((nl = buf.find('\n')) != std::string::npos) {
        std::string line = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        auto req = Json::parse(line, nullptr, false);
        if (!req.is_discarded() && broker::request_action(req) == "kill") (void)s.kill();
        inbox.push(std::move(line));
      }
    }
    inbox.close();
  });

  while (auto line = inbox.pop()) {
    auto req = parse_json(*line, Code::ProtocolError, "the request");
    if (!req) {
      (void)s.note_refusal("protocol.refused", Json{{"line_sha256", sha256_hex(*line)}}, req.error());
      emit({{"id", nullptr}, {"ok", false}, {"error", req.error().to_json()}});
      continue;
    }
    emit(broker::handle_request(s, *req));
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
  static SessionCliOptions o;
  auto* cmd = app.add_subcommand(
      "session", "open a broker session and speak the action protocol: JSON lines on stdin and stdout");
  cmd->add_option("--policy", o.policy_file, "task policy (JSON); the built-in default when absent");
  cmd->add_option("--defaults", o.defaults, "worker default policy");
  cmd->add_option("--workspace", o.workspace, "workspace directory (overrides the policy's)");
  cmd->add_option("--slot", o.slot, "the slot whose seat the session takes: NAME or MACHINE:NAME (default: default)");
  cmd->callback([&g, &run] { run = [&g] { return session_verb(g, o); }; });
}

}  // namespace airlock::cli
