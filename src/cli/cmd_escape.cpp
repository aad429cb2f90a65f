// `airlock escape-suite [--executor NAME] [--json]`: DESIGN.md's ten breaches and those added since, run in
// each executor, printed as a matrix (breach x executor) with evidence and one verdict line per executor.
// Exit 0 when every run matched its expectation (host: all breached; real tiers: all contained);
// 1 otherwise, or when the executor named by --executor cannot run here.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "base/unique_fd.h"
#include "cli/verbs.h"
#include "escape/escape_suite.h"

namespace airlock::cli {
namespace {

struct EscapeOptions {
  std::string executor;
};

// The write end of the pipe SIGINT/SIGTERM/SIGHUP are reported through. A handler, not a blocked
// mask read with signalfd: a blocked mask would be inherited by every session's command.
int g_signal_pipe = -1;
void on_signal(int) {
  if (g_signal_pipe >= 0) (void)!::write(g_signal_pipe, "x", 1);
}

}  // namespace

Result<escape::SuiteReport> run_escape_suite(escape::SuiteOptions so, bool json) {
  if (!json && ::isatty(2))
    so.on_result = [](const escape::TierResult& t, const escape::ScenarioResult& r) {
      std::fprintf(stderr, "airlock: %-10s %-30s %s (%.1f s)\n",
                   std::string(policy::to_string(t.executor)).c_str(),
                   std::string(escape::to_string(r.breach)).c_str(),
                   r.breached() ? "BREACHED" : std::string(escape::to_string(r.verdict)).c_str(), r.seconds);
    };
  escape::Suite suite(so);

  // A signal cancels the suite, which then stops the running probe and removes its canaries.
  int sp[2];
  if (::pipe2(sp, O_CLOEXEC) < 0) return fail_errno(Code::IoError, "pipe2", errno);
  UniqueFd sig_read(sp[0]), sig_write(sp[1]);
  UniqueFd donefd(::eventfd(0, EFD_CLOEXEC));
  g_signal_pipe = sig_write.get();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
  std::thread waiter([&] {
    pollfd fds[2] = {{sig_read.get(), POLLIN, 0}, {donefd.get(), POLLIN, 0}};
    while (::poll(fds, 2, -1) >= 0 || errno == EINTR) {
      if (fds[1].revents & POLLIN) return;
      if (fds[0].revents & POLLIN) {
        char c;
        (void)!::read(sig_read.get(), &c, 1);
        suite.cancel();
      }
    }
  });
  auto report = suite.run();
  uint64_t one = 1;
  (void)!::write(donefd.get(), &one, sizeof one);
  waiter.join();
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &dfl, nullptr);
  g_signal_pipe = -1;
  return report;
}

void print_escape_report(const escape::SuiteReport& report, bool json) {
  // Replace, not throw: a probe's stderr in the details may hold any bytes.
  if (json)
    std::printf("%s\n", report.to_json().dump(2, ' ', false, Json::error_handler_t::replace).c_str());
  else
    std::fputs(report.to_text().c_str(), stdout);
}

namespace {

int escape_verb(Globals& g, const EscapeOptions& o) {
  auto profile = parse_profile(g.profile);
  if (!profile) return refuse(profile.error(), g.json);
  auto state = resolve_state_dir(g.state_dir);
  if (!state) return refuse(state.error(), g.json);

  escape::SuiteOptions so;
  so.state_dir = *state;
  so.profile = *profile;
  if (!o.executor.empty()) so.executor = enum_from_string<policy::ExecutorKind>(o.executor);
  auto report = run_escape_suite(so, g.json);
  if (!report) return refuse(report.error(), g.json);
  print_escape_report(*report, g.json);
  return report->ok() ? 0 : 1;
}

}  // namespace

void add_escape_suite(CLI::App& app, Globals& g, Action& run) {
  static EscapeOptions o;
  auto* cmd = app.add_subcommand(
      "escape-suite",
      "run the escape scenarios in each executor: the host must breach, real tiers must contain");
  cmd->add_option("--executor", o.executor,
                  "the one executor to test (default: every executor this build applies)")
      ->check(CLI::IsMember({"host", "landlock", "namespaces", "container", "microvm"}));
  cmd->add_flag("--json", g.json, "print the matrix and the evidence as JSON");
  cmd->callback([&g, &run] { run = [&g] { return escape_verb(g, o); }; });
}

}  // namespace airlock::cli
