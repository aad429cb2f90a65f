// `airlock serve`: the HTTP API on a unix socket in the state directory, and optionally on loopback TCP.
#include <sys/resource.h>

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "exec/planner.h"
#include "server/server.h"
#include "cli/verbs.h"

namespace airlock::cli {
namespace {

struct ServeOptions {
  std::optional<std::string> defaults, socket, listen, token_file, operator_token_file, credentials_command;
  bool credentials_env = false;
  size_t threads = 64, max_sessions = 256, max_body_bytes = 8u << 20, vm_pool = 0;
  size_t max_headers = 100, max_head_bytes = 64u << 10;
  uint64_t request_seconds = 30, idle_seconds = 900, max_state_bytes = 0, max_session_receipt_bytes = 16u << 20;
};

Result<int> serve(Globals& g, ServeOptions& o) {
  server::ServerOptions so;
  so.profile = TRY(parse_profile(g.profile));
  so.state_dir = TRY(resolve_state_dir(g.state_dir));
  so.base_policy = TRY(load_policy(o.defaults, std::nullopt));
  so.threads = o.threads;
  so.max_sessions = o.max_sessions;
  so.max_body_bytes = o.max_body_bytes;
  so.max_headers = o.max_headers;
  so.max_head_bytes = o.max_head_bytes;
  so.idle_seconds = o.idle_seconds;
  so.request_seconds = o.request_seconds;
  so.max_state_bytes = o.max_state_bytes;
  so.max_session_receipt_bytes = o.max_session_receipt_bytes;
  so.vm_pool = o.vm_pool;
  if (o.credentials_command)
    so.credentials = exec::credentials_from_command(
        *o.credentials_command, o.credentials_env ? exec::CredentialDelivery::Env : exec::CredentialDelivery::Pipe);
  if (o.operator_token_file) {
    so.operator_token = TRY(server::read_token_file(*o.operator_token_file));
    if (o.token_file && so.operator_token == TRY(server::read_token_file(*o.token_file)))
      return fail(Code::OptionInvalid, "--operator-token-file holds the agent's token (--token-file): an agent could "
                                       "approve its own calls");
  }
  // Sessions on other machines are dispatched by the airlock beside this executable, with this
  // server's state directory, store and machine id.
  std::error_code ec;
  if (auto self = std::filesystem::read_symlink("/proc/self/exe", ec).string(); !ec && !self.empty()) {
    std::string airlock = self.substr(0, self.rfind('/') + 1) + "airlock";
    if (::access(airlock.c_str(), X_OK) == 0) {
      so.dispatch_command = {airlock, "--state-dir", so.state_dir};
      if (!g.store_url.empty()) so.dispatch_command.insert(so.dispatch_command.end(), {"--store", g.store_url});
      if (!g.machine_id.empty()) so.dispatch_command.insert(so.dispatch_command.end(), {"--machine-id", g.machine_id});
      if (!g.profile.empty()) so.dispatch_command.insert(so.dispatch_command.end(), {"--profile", g.profile});
    }
  }
  so.executors_report = [profile = so.profile, host = std::make_shared<exec::HostProbe>(so.state_dir)] {
    return doctor_report(profile, host->facts(plan::FactNeeds::all()));
  };
  std::optional<server::ListenAddress> tcp;
  std::string token;
  if (o.listen) {
    tcp = TRY(server::parse_listen(*o.listen));
    if (!o.token_file)
      return fail(Code::OptionInvalid, "--listen needs --token-file: the TCP listener admits only bearer tokens");
    token = TRY(server::read_token_file(*o.token_file));
  }
  // Each open session holds a handful of descriptors (its receipts, and the sandbox built ahead
  // for its next command: channels, pidfd, cgroup files): the soft limit goes up to the hard one,
  // so max_sessions is what bounds them, not a 1024 that systemd and shells default to. Every
  // sandbox sets its command's own RLIMIT_NOFILE from the plan.
  if (rlimit nofile{}; ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  // Before any thread starts: every thread then leaves SIGINT/SIGTERM/SIGHUP to sigwait below.
  sigset_t mask = block_stop_signals();
  ::signal(SIGPIPE, SIG_IGN);  // a client that went away is a failed write, not a crash

  server::Server srv(so);
  std::string socket = o.socket.value_or(so.state_dir + "/airlock.sock");
  TRY(srv.bind_unix(socket));
  Json listening = {{"unix", socket}};
  if (tcp) {
    int port = TRY(srv.bind_tcp(*tcp, std::move(token)));
    listening["tcp"] = fmt::format("{}:{}", tcp->host.find(':') == std::string::npos ? tcp->host : "[" + tcp->host + "]",
                                   port);
  }
  srv.start();
  // One line on stdout when the listeners accept: scripts and tests wait for it.
  std::printf("%s\n", Json{{"listening", listening}, {"state_dir", so.state_dir}}.dump().c_str());
  std::fflush(stdout);

  int sig = 0;
  while (::sigwait(&mask, &sig) != 0) {
  }
  std::fprintf(stderr, "airlock serve: %s: killing open sessions and stopping\n", ::strsignal(sig));
  srv.shutdown(fmt::format("server stopped by {}", ::sigabbrev_np(sig)));
  return 0;
}

}  // namespace

void add_serve(CLI::App& app, Globals& g, Action& run) {
  static ServeOptions o;
  auto* cmd = app.add_subcommand("serve", "serve the broker's HTTP API on a unix socket (and loopback TCP)");
  cmd->add_option("--socket", o.socket, "unix socket path (default: STATE_DIR/airlock.sock, mode 0600)");
  cmd->add_option("--listen", o.listen, "also listen on loopback TCP, HOST:PORT (127.0.0.1:0 picks a port)");
  cmd->add_option("--token-file", o.token_file, "bearer token for --listen (owned by you, mode 0600)");
  cmd->add_option("--credentials-command", o.credentials_command,
                  "host command run per json-protocol dispatch in any session; its stdout is handed to the tool as "
                  "fresh credentials");
  cmd->add_flag("--credentials-env", o.credentials_env,
                "hand credentials as AIRLOCK_CREDENTIALS instead of the pipe on descriptor 3");
  cmd->add_option("--operator-token-file", o.operator_token_file,
                  "the operator's bearer token for /v1/approvals on every listener (owned by you, mode 0600); "
                  "without it the server takes no approvals");
  cmd->add_option("--defaults", o.defaults, "worker default policy a posted task policy is layered over");
  cmd->add_option("--threads", o.threads, "worker threads per listener (a running tool holds one)")
      ->check(CLI::Range(4, 1024));
  cmd->add_option("--max-sessions", o.max_sessions, "open sessions at most")->check(CLI::Range(1, 65536));
  cmd->add_option("--vm-pool", o.vm_pool,
                  "microvm sessions keep N guests booted ahead, each used for one tool call (default 0: off)")
      ->check(CLI::Range(0, 16));
  cmd->add_option("--max-body-bytes", o.max_body_bytes, "largest request body, whatever its transfer encoding")
      ->check(CLI::Range(1024, 1 << 30));
  cmd->add_option("--max-headers", o.max_headers, "most headers in a request (default 100)")->check(CLI::Range(8, 10000));
  cmd->add_option("--max-head-bytes", o.max_head_bytes,
                  "largest request line and headers together (default 65536; a line is at most 8192)")
      ->check(CLI::Range(1024, 1 << 24));
  cmd->add_option("--request-seconds", o.request_seconds,
                  "a request must arrive whole within this long of its first byte, else 408 (default 30; 0: no bound)")
      ->check(CLI::Range(0, 86400));
  cmd->add_option("--idle-seconds", o.idle_seconds,
                  "kill a session no request touched for this long (default 900; 0: never)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--max-state-bytes", o.max_state_bytes,
                  "refuse new sessions while receipts and views in the state directory hold this much (default 0: "
                  "no bound)");
  cmd->add_option("--max-session-receipt-bytes", o.max_session_receipt_bytes,
                  "a session's receipts past this stop admitting actions; refusals are only counted (default 16 MiB; "
                  "0: no bound)");
  cmd->callback([&g, &run] {
    run = [&g] {
      auto r = serve(g, o);
      return r ? *r : refuse(r.error(), false);
    };
  });
}

}  // namespace airlock::cli
