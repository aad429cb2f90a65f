// `airlock run CMD`: open a session under the policy, run the command in the planned
// executor, write back on success, close. The command's exit status passes through.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <thread>

#include <fmt/ranges.h>

#include "base/encoding.h"
#include "base/fs.h"
#include "base/unique_fd.h"
#include "broker/session.h"
#include "cli/store_support.h"
#include "cli/verbs.h"

namespace airlock::cli {
namespace {

// One line of what enforced, read from the record's fields.
std::string enforced_summary(const exec::Enforced& e) {
  std::vector<std::string> parts;
  if (e.namespaces) parts.push_back("namespaces");
  if (e.cgroup) parts.push_back(fmt::format("cgroup v{} memory+pids+cpu", e.cgroup->version));
  if (e.landlock) parts.push_back(fmt::format("Landlock ABI {}", e.landlock->abi));
  if (e.seccomp) parts.push_back("seccomp");
  parts.push_back("rlimits");
  if (!e.cgroup) parts.push_back(fmt::format("processes by {}", plan::to_string(e.process_limit)));
  if (e.microvm) parts.push_back(fmt::format("guest pids.max {}", e.microvm->guest_pids_max));
  parts.push_back(fmt::format("network {}", exec::to_string(e.network)));
  return fmt::format("{}", fmt::join(parts, ", "));
}

// With --json the command's stdout reaches ours through a pipe this relays, so that the summary
// knows whether the output ended its last line: the summary always starts a line of its own.
class StdoutRelay {
 public:
  // The pipe's write end is what the command gets as stdout (valid until finish()).
  static Result<std::unique_ptr<StdoutRelay>> start() {
    int p[2], q[2];
    if (::pipe2(p, O_CLOEXEC) < 0) return fail_errno(Code::IoError, "pipe for the command's stdout", errno);
    UniqueFd read(p[0]), write(p[1]);
    if (::pipe2(q, O_CLOEXEC) < 0) return fail_errno(Code::IoError, "pipe for the relay's stop", errno);
    auto r = std::unique_ptr<StdoutRelay>(
        new StdoutRelay(std::move(read), std::move(write), UniqueFd(q[0]), UniqueFd(q[1])));
    r->thread_ = std::thread([self = r.get()] { self->relay(); });
    return r;
  }
  ~StdoutRelay() { (void)finish(); }
  StdoutRelay(const StdoutRelay&) = delete;
  int write_end() const { return write_.get(); }
  // Called once the executor returned (every process of the command is gone): relays what the
  // pipe still holds and stops — at its end, or where it is empty, so a writer that outlived the
  // command can never hold airlock open. True when the output ended inside a line.
  bool finish() {
    write_.reset();
    stop_w_.reset();  // the relay sees the stop as end of file on stop_r_
    if (thread_.joinable()) thread_.join();
    return last_ != '\n' && last_ != 0;
  }

 private:
  StdoutRelay(UniqueFd read, UniqueFd write, UniqueFd stop_r, UniqueFd stop_w)
      : read_(std::move(read)), write_(std::move(write)), stop_r_(std::move(stop_r)), stop_w_(std::move(stop_w)) {}
  // false when our stdout is gone (its reader left: EPIPE, not a SIGPIPE that ends airlock).
  bool put(const char* buf, ssize_t n) {
    last_ = buf[n - 1];
    for (ssize_t done = 0; done < n;) {
      ssize_t w = ::write(STDOUT_FILENO, buf + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      done += w;
    }
    return true;
  }
  void relay() {
    sigset_t pipe_signal;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);
    char buf[65536];
    bool stopping = false;
    for (;;) {
      if (!stopping) {
        pollfd fds[2] = {{read_.get(), POLLIN, 0}, {stop_r_.get(), POLLIN, 0}};
        if (::poll(fds, 2, -1) < 0) {
          if (errno == EINTR) continue;
          break;
        }
        if (fds[1].revents) {  // stopped: from here on, only what the pipe holds now
          stopping = true;
          ::fcntl(read_.get(), F_SETFL, ::fcntl(read_.get(), F_GETFL) | O_NONBLOCK);
        } else if (!fds[0].revents) {
          continue;
        }
      }
      ssize_t n = ::read(read_.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || !put(buf, n)) break;  // end of file, empty after the stop, or stdout gone
    }
    // The read end closes: a command still writing meets a closed pipe, as it would have met ours.
    read_.reset();
  }
  UniqueFd read_, write_, stop_r_, stop_w_;
  std::thread thread_;
  char last_ = 0;  // the last byte relayed; 0 while none was
};

}  // namespace

int run_confined(Globals& g, RunOptions& o, const std::function<Result<void>(SessionStart&)>& before) {
  // Zero configuration: the current directory is the workspace (protected paths and denied names
  // apply as to any), and the policy is discovered from it when no flag names one.
  std::string cwd = absolute_path(".");
  auto start = prepare_session(g, o.defaults, o.policy_file, static_cast<bool>(before), o.workspace.value_or(cwd));
  if (!start) return refuse(start.error(), g.json);
  if (!o.workspace && !start->policy.workspace) {
    // The current directory, but never a whole home directory (or one above it) by default: its
    // start-up files and the user's own configuration would be the command's to rewrite.
    char home[PATH_MAX], here[PATH_MAX];
    const char* h = std::getenv("HOME");
    if (h && *h == '/' && ::realpath(h, home) && ::realpath(cwd.c_str(), here)) {
      std::string outer = here, inner = home;
      if (outer == "/" || inner == outer || inner.starts_with(outer + "/"))
        return refuse({Code::PolicyInvalid,
                       fmt::format("the current directory {} holds your home directory {}: airlock does not make it "
                                   "the workspace unasked; run from a project directory, or pass --workspace",
                                   outer, inner),
                       {{"directory", outer}, {"home", inner}}},
                      g.json);
    }
    o.workspace = cwd;
  }
  if (before)
    if (auto r = before(*start); !r) return refuse(r.error(), g.json);
  // SIGINT/SIGTERM/SIGHUP stop the command (and everything it started); a thread waits for them.
  sigset_t mask = block_stop_signals();

  // A seat in the slot before anything is prepared; released (with the outcome) on every path.
  // After the mask: the seat's heartbeat thread must not take the signals the waiter reads.
  auto held = reserve_seat(g, start->state_dir, o.slot, policy::digest(start->policy));
  if (!held) return refuse(held.error(), g.json);
  store::Seat& seat = *held->seat;
  auto refuse_run = [&](const Error& e) {
    seat.release(std::string(to_name(e.code)));
    return refuse(e, g.json);
  };

  broker::SessionOptions so(start->state_dir, start->profile, o.workspace);
  so.id = seat.run().id;  // one id: `runs show`, `receipts show` and `session kill` all take it
  so.agent = o.agent;
  so.model_gateway = o.model_gateway;
  auto session = broker::Session::open(start->policy, start->facts, so);
  if (!session) return refuse_run(session.error());
  auto& s = **session;
  (void)seat.record_enforcement(std::string(policy::to_string(s.plan().executor())), s.plan().tier(), s.plan().why,
                                plan::to_json(start->facts));
  // The summary file names the session from its start: a reader (`run --machine`) finds a run
  // killed before its end by it (no "outcome" yet), and its receipts.
  if (!o.summary_file.empty())
    if (auto w = write_file_atomic(o.summary_file,
                                   Json({{"session", s.id()}, {"receipts", s.receipts_path()}}).dump() + "\n", 0600);
        !w)
      return refuse_run(w.error());
  if (!o.quiet && !g.json) {
    for (const auto* l : {&start->layers.defaults, &start->layers.task})
      if (*l && ((*l)->origin == "user" || (*l)->origin == "repository"))
        std::fprintf(stderr, "airlock: policy: the %s's %s\n", (*l)->origin.c_str(),
                     escape_for_terminal((*l)->file).c_str());
    if (start->policy.confinement == policy::Confinement::Vendor)
      std::fprintf(stderr, "airlock: confinement vendor: %s; session %s\n", kVendorClaim.data(), s.id().c_str());
    else
      std::fprintf(stderr, "airlock: %s tier (%s), session %s\n",
                   std::string(policy::to_string(s.plan().executor())).c_str(), enforced_summary(s.enforced()).c_str(),
                   s.id().c_str());
  }

  // A stop signal interrupts the session (the command and all it started are stopped).
  std::atomic<bool> interrupted = false;
  StopSignalWaiter waiter(mask, [&] {
    interrupted = true;
    s.interrupt();
  });
  exec::Command command;
  command.argv = o.command;
  command.env = o.env;
  command.pass_fd = o.pass_fd;
  command.scrub_env = o.scrub_env;
  command.private_dirs = o.private_dirs;
  // The last look before the spawn: a seat finalised meanwhile (by another machine that judged
  // its holder dead, or by an operator) takes no command.
  if (auto held_still = seat.still_held(); !held_still) {
    waiter.done();
    (void)s.kill();
    return refuse_run(held_still.error());
  }
  std::unique_ptr<StdoutRelay> relay;
  if (g.json) {
    auto started = StdoutRelay::start();
    if (!started) {
      waiter.done();
      (void)s.kill();
      return refuse_run(started.error());
    }
    relay = std::move(*started);
    command.stdout_fd = relay->write_end();
  }
  auto outcome = s.run_command(command);
  waiter.done();
  // What airlock prints on stdout from here (the summary, a refusal) starts a line of its own.
  if (relay && relay->finish()) std::fputc('\n', stdout);
  if (!outcome) {
    (void)s.kill();
    int refused = refuse_run(outcome.error());
    // A command that could not start exits as a shell says (127 not found, 126 not executable);
    // the refusal above still names why.
    return exec::not_started_status(outcome.error()).value_or(refused);
  }
  bool success = outcome->status.shell_status() == 0 && !outcome->timed_out && !outcome->stopped;
  // A spent budget ends the session the way the kill switch does: nothing is written back.
  auto wb = s.close(success);
  if (!wb) return refuse_run(wb.error());

  int rc = outcome->status.shell_status();
  std::vector<Error> refusals;
  if (outcome->budget_exhausted)
    refusals.push_back({Code::BudgetExhausted,
                        fmt::format("the session's budget of {} ms ran out; the command was killed",
                                    s.plan().limits.session_budget_ms),
                        {}});
  else if (outcome->timed_out)
    refusals.push_back({Code::ToolTimeout,
                        fmt::format("the command ran past its wall-time limit of {} ms and was killed",
                                    s.plan().limits.wall_timeout_ms),
                        {}});
  if (interrupted || outcome->stopped)
    refusals.push_back({Code::SessionKilled, "stopped by a signal; nothing was written back", {}});
  for (const auto& r : wb->refused)
    refusals.push_back({Code::WriteBackRefused, fmt::format("{} ({}) was not written back", r.path, r.reason),
                        {{"path", r.path}, {"reason", r.reason}}});

  if (g.json || !o.summary_file.empty()) {
    Json j = {{"session", s.id()},
              {"executor", policy::to_string(s.plan().executor())},
              {"tier", s.plan().tier()},
              {"outcome", outcome->to_json()},
              {"written_back", wb->to_json()},
              {"receipts", s.receipts_path()}};
    Json errs = Json::array();
    for (const auto& e : refusals) errs.push_back(e.to_json());
    j["refusals"] = errs;
    std::string line = j.dump(-1, ' ', false, Json::error_handler_t::replace);  // names from the view
    if (!o.summary_file.empty()) {
      // Written whole (a reader waiting for it never sees half), for this user alone.
      if (auto w = write_file_atomic(o.summary_file, line + "\n", 0600); !w)
        std::fprintf(stderr, "airlock: the summary could not be written: %s\n", escape_for_terminal(w.error().message).c_str());
    } else {
      std::fflush(stdout);
      std::printf("%s\n", line.c_str());
    }
  }
  // Names in these lines come from the sandbox: escaped, so a newline or an escape sequence in a
  // file name cannot forge a line of airlock's own or drive the terminal.
  for (const auto& e : refusals)
    std::fprintf(stderr, "airlock: refused: %s: %s\n", std::string(to_name(e.code)).c_str(),
                 escape_for_terminal(e.message).c_str());
  if (!o.quiet && !g.json) {
    std::string st = outcome->status.signaled ? fmt::format("signal {}", outcome->status.signal)
                                              : fmt::format("exit {}", outcome->status.code);
    std::string wrote = success ? fmt::format("wrote back {} file(s), {} dir(s), deleted {}", wb->written.size(),
                                              wb->created_dirs.size(), wb->deleted.size())
                                : std::string("nothing written back");
    if (success && !wb->kept.empty()) wrote += fmt::format(", kept {} git object(s) deleted in the view", wb->kept.size());
    std::fprintf(stderr, "airlock: %s in %.1f ms (cpu %.1f ms, max rss %lld KiB); %s\n", st.c_str(), outcome->wall_ms,
                 (outcome->user_us + outcome->system_us) / 1000.0, static_cast<long long>(outcome->max_rss_kb),
                 wrote.c_str());
    for (const auto& w : wb->written) std::fprintf(stderr, "airlock:   wrote %s\n", escape_for_terminal(w).c_str());
    for (const auto& d : wb->deleted) std::fprintf(stderr, "airlock:   deleted %s\n", escape_for_terminal(d).c_str());
    if (outcome->descendants_killed > 0)
      std::fprintf(stderr, "airlock: killed %lld process(es) left behind by the command\n",
                   static_cast<long long>(outcome->descendants_killed));
    std::fprintf(stderr, "airlock: receipts %s\n", s.receipts_path().c_str());
  }
  seat.release(!refusals.empty()           ? std::string(to_name(refusals.front().code))
               : outcome->status.signaled ? fmt::format("signal {}", outcome->status.signal)
                                          : fmt::format("exit {}", outcome->status.code));
  if (!refusals.empty()) return kRefusedExit;
  return rc;
}

void add_run(CLI::App& app, Globals& g, Action& run) {
  static RunOptions o;
  auto* cmd = app.add_subcommand("run", "run a command confined by the policy's executor");
  cmd->add_option("--policy", o.policy_file,
                  "task policy (JSON); when absent, the repository's .airlock/policy.json, if any");
  cmd->add_option("--defaults", o.defaults,
                  "worker default policy; when absent, ~/.config/airlock/policy.json, if any");
  cmd->add_option("--workspace", o.workspace,
                  "workspace directory (overrides the policy's); the current directory when neither names one");
  cmd->add_flag("--json", g.json, "print a JSON summary as the last line of stdout");
  cmd->add_option("--slot", o.slot, "the slot whose seat the run takes: NAME or MACHINE:NAME (default: default)");
  cmd->add_option("--summary-file", o.summary_file,
                  "write the JSON summary --json prints to this file instead (stdout stays the command's alone)");
  cmd->add_option("--machine", o.machine,
                  "run on this machine of the fleet (`airlock machine add`), over ssh; --workspace is a path there");
  cmd->add_flag("-q,--quiet", o.quiet, "print nothing of airlock's own unless refused");
  // Everything from the first positional on is the command's, options included (`airlock run ls
  // -la`, `airlock run sh -c 'x' --state-dir y`); run's own options and the global ones come
  // before it. `--` before the command still ends the options.
  cmd->positionals_at_end();
  cmd->add_option("command", o.command, "the command and its arguments (-- before it is optional)")->required();
  cmd->callback([&g, &run] {
    o.command = as_typed(g.args, o.command);
    run = [&g] { return o.machine.empty() ? run_confined(g, o) : run_on_machine_cli(g, o, o.machine); };
  });
}

}  // namespace airlock::cli
