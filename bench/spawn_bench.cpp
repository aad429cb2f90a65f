// spawn_bench: times whole commands, interleaved round by round, and prints medians and ratios.
// Usage: spawn_bench [--rounds N] [--warmup N] [--budget SECONDS] [--min-runs N] [--state-dir DIR]
//                    [--json] NAME=COMMAND ...
// COMMAND is split on spaces; `fork: ARGV...` runs it with fork+exec instead of posix_spawn (vfork).
// `lib:POLICY ARGV...` runs ARGV through the library instead: one
// executor prepared once under POLICY (as a C++ host holds it), then Executor::run per call;
// `pool:POLICY ARGV...` the same with one microvm guest booted ahead (each guest serves one run);
// `warm:POLICY ARGV...` the same with each run's sandbox built ahead (Executor::keep_warm, as
// `airlock serve` runs a session's commands): built between runs, its cost is in the CPU column.
// `serve:SOCKET:POLICY TOOL` times a client's run_tool request to a running `airlock serve` on its
// unix socket SOCKET, in one session opened under POLICY (a JSON file), until its answer with the
// exit status; CPU there is the server's own and its reaped sandboxes' (/proc/PID/stat, in clock
// ticks, so spread evenly over the runs: the total over all runs divided by their number).
// The first variant is the baseline the ratios refer to. Beside the wall time, each run's CPU time
// (user + system) and minor page faults are measured: of the command and everything it waited for
// (wait4's rusage), or for a library variant of this process and its reaped children.
#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "base/json_util.h"
#include "exec/owned_executor.h"
#include "exec/planner.h"
#include "exec/vm_image.h"
#include "linux/probe.h"
#include "policy/task_policy.h"
#include "server/client.h"

extern char** environ;

namespace {

using namespace airlock;

struct Variant {
  std::string name;
  std::vector<std::string> argv;
  std::optional<exec::OwnedExecutor> lib;  // set for a library variant
  // A serve variant: the client, the session's run_tool path and body, the server's pid.
  std::unique_ptr<server::HttpClient> client;
  std::string run_path, run_body;
  pid_t server = -1;
  double server_ticks0 = 0;
  bool fork = false;                       // fork+exec instead of posix_spawn
  std::string unavailable;                 // why it did not run (a library executor that did not open)
  std::vector<double> ms;
  std::vector<double> teardown_ms;  // a library variant's own account of its teardown (cgroups removed)
  std::vector<double> cpu_ms;       // user + system time of each run
  std::vector<double> faults;       // minor page faults of each run
  size_t runs = 0;  // planned timed runs (fewer than the rounds for a slow variant under --budget)
  int failures = 0;
  std::string last_failure;
};

int dev_null() {
  static int fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  return fd;
}

double elapsed_ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double cpu_of(const rusage& u) {
  return (static_cast<double>(u.ru_utime.tv_sec) + static_cast<double>(u.ru_stime.tv_sec)) * 1e3 +
         (static_cast<double>(u.ru_utime.tv_usec) + static_cast<double>(u.ru_stime.tv_usec)) / 1e3;
}

// This process and its reaped children, summed: what a library run costs its host.
std::pair<double, double> own_usage() {
  rusage self{}, kids{};
  ::getrusage(RUSAGE_SELF, &self);
  ::getrusage(RUSAGE_CHILDREN, &kids);
  return {cpu_of(self) + cpu_of(kids), static_cast<double>(self.ru_minflt + kids.ru_minflt)};
}

double run_lib(Variant& v) {
  exec::Command cmd;
  cmd.argv = v.argv;
  cmd.stdout_fd = dev_null();
  cmd.stderr_fd = dev_null();
  auto [cpu0, faults0] = own_usage();
  auto t0 = std::chrono::steady_clock::now();
  auto out = v.lib->executor->run(cmd);
  double ms = elapsed_ms(t0);
  auto [cpu1, faults1] = own_usage();
  v.cpu_ms.push_back(cpu1 - cpu0);
  v.faults.push_back(faults1 - faults0);
  if (!out) {
    ++v.failures;
    v.last_failure = std::string(to_name(out.error().code)) + ": " + out.error().message;
    return -1;
  }
  if (out->status.signaled || out->status.code != 0) {
    ++v.failures;
    v.last_failure = "exit status " + std::to_string(out->status.code);
  }
  v.teardown_ms.push_back(out->teardown_ms);
  return ms;
}

// Waits for `pid`; the milliseconds since t0, and a failure counted unless it exited 0.
double reap(Variant& v, pid_t pid, std::chrono::steady_clock::time_point t0) {
  int st = 0;
  rusage u{};
  ::wait4(pid, &st, 0, &u);
  double ms = elapsed_ms(t0);
  v.cpu_ms.push_back(cpu_of(u));
  v.faults.push_back(static_cast<double>(u.ru_minflt));
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    ++v.failures;
    v.last_failure = WIFEXITED(st) ? "exit status " + std::to_string(WEXITSTATUS(st))
                                   : "signal " + std::to_string(WTERMSIG(st));
  }
  return ms;
}

double run_exec(Variant& v) {
  std::vector<char*> av;
  for (auto& a : v.argv) av.push_back(a.data());
  av.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  auto t0 = std::chrono::steady_clock::now();
  pid_t pid;
  int rc = posix_spawn(&pid, av[0], &fa, nullptr, av.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    ++v.failures;
    v.last_failure = std::string("posix_spawn: ") + std::strerror(rc);
    return -1;
  }
  return reap(v, pid, t0);
}

// A plain fork+exec: the child is a copy of this process (page tables and all), unlike
// posix_spawn's vfork, which shares them until exec. The supervisor is such a copy.
double run_fork(Variant& v) {
  std::vector<char*> av;
  for (auto& a : v.argv) av.push_back(a.data());
  av.push_back(nullptr);
  auto t0 = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(dev_null(), 1);
    ::dup2(dev_null(), 2);
    ::execve(av[0], av.data(), environ);
    ::_exit(127);
  }
  if (pid < 0) {
    ++v.failures;
    v.last_failure = std::string("fork: ") + std::strerror(errno);
    return -1;
  }
  return reap(v, pid, t0);
}

// /proc/PID/stat: {CPU clock ticks of the process and its reaped children, minor faults of both}.
std::pair<double, double> server_usage(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  if (close == std::string::npos) return {0, 0};
  std::istringstream f(text.substr(close + 2));
  std::vector<std::string> field;  // field[0] is the state, field 3 of stat(5)
  for (std::string w; f >> w;) field.push_back(w);
  if (field.size() < 15) return {0, 0};
  auto n = [&](size_t stat_field) { return std::stod(field[stat_field - 3]); };
  return {n(14) + n(15) + n(16) + n(17), n(10) + n(11)};
}

double run_serve(Variant& v) {
  auto [ticks0, faults0] = server_usage(v.server);
  (void)ticks0;
  auto t0 = std::chrono::steady_clock::now();
  auto reply = v.client->request("POST", v.run_path, v.run_body);
  double ms = elapsed_ms(t0);
  v.faults.push_back(server_usage(v.server).second - faults0);
  if (!reply || reply->status != 200) {
    ++v.failures;
    v.last_failure = reply ? fmt::format("HTTP {}: {}", reply->status, reply->body.substr(0, 300)) : reply.error().message;
    return -1;
  }
  Json j = reply->json();
  if (!j.is_object() || j.value("/outcome/status"_json_pointer, -1) != 0) {
    ++v.failures;
    v.last_failure = "not exit status 0: " + reply->body.substr(0, 300);
  }
  return ms;
}

// Opens the serve variant's session: POST /v1/sessions with the policy, the server's pid by
// SO_PEERCRED. "" or why it cannot run.
std::string open_served(Variant& v, const std::string& spec) {
  size_t colon = spec.find(':', 6);
  if (colon == std::string::npos || v.argv.size() != 1) return "expected serve:SOCKET:POLICY TOOL";
  std::string socket = spec.substr(6, colon - 6), policy_file = spec.substr(colon + 1);
  std::ifstream in(policy_file);
  std::string policy((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (policy.empty()) return "cannot read " + policy_file;
  server::Endpoint at;
  at.unix_path = socket;
  v.client = std::make_unique<server::HttpClient>(at);
  auto opened = v.client->request("POST", "/v1/sessions", policy);
  if (!opened) return opened.error().message;
  if (opened->status != 201) return fmt::format("HTTP {}: {}", opened->status, opened->body.substr(0, 300));
  std::string id = opened->json().value("session", "");
  v.run_path = "/v1/sessions/" + id + "/run_tool";
  v.run_body = Json{{"tool", v.argv[0]}}.dump();
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket.c_str());
  ucred cred{};
  socklen_t len = sizeof cred;
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return "cannot tell the server's pid";
  ::close(fd);
  v.server = cred.pid;
  return "";
}

double run_once(Variant& v) {
  return v.client ? run_serve(v) : v.lib ? run_lib(v) : v.fork ? run_fork(v) : run_exec(v);
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::string json_text(const std::string& s) { return Json(s).dump(); }

}  // namespace

int main(int argc, char** argv) {
  int rounds = 200, warmup = 10;
  size_t min_runs = 15;
  double budget_s = 0;  // 0: every variant runs every round
  bool json = false;
  std::string state_dir;
  std::vector<Variant> vs;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool has_value = i + 1 < argc;
    if (a == "--rounds" && has_value) { rounds = std::stoi(argv[++i]); continue; }
    if (a == "--warmup" && has_value) { warmup = std::stoi(argv[++i]); continue; }
    if (a == "--budget" && has_value) { budget_s = std::stod(argv[++i]); continue; }
    if (a == "--min-runs" && has_value) { min_runs = std::stoul(argv[++i]); continue; }
    if (a == "--state-dir" && has_value) { state_dir = argv[++i]; continue; }
    if (a == "--json") { json = true; continue; }
    auto eq = a.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "spawn_bench: expected NAME=COMMAND, got %s\n", a.c_str());
      return 2;
    }
    Variant v;
    v.name = a.substr(0, eq);
    std::istringstream in(a.substr(eq + 1));
    for (std::string w; in >> w;) v.argv.push_back(w);
    if (v.argv.empty()) {
      std::fprintf(stderr, "spawn_bench: %s has no command\n", v.name.c_str());
      return 2;
    }
    if (v.argv[0].starts_with("serve:")) {
      std::string spec = v.argv[0];
      v.argv.erase(v.argv.begin());
      v.unavailable = open_served(v, spec);
    } else if (v.argv[0] == "fork:") {
      v.fork = true;
      v.argv.erase(v.argv.begin());
    } else if (v.argv[0].starts_with("lib:") || v.argv[0].starts_with("pool:") || v.argv[0].starts_with("warm:")) {
      // pool: a microvm executor keeping one guest booted ahead (each used for one run).
      size_t vm_pool = v.argv[0].starts_with("pool:") ? 1 : 0;
      bool built_ahead = v.argv[0].starts_with("warm:");
      std::string policy_file = v.argv[0].substr(v.argv[0].find(':') + 1);
      v.argv.erase(v.argv.begin());
      if (state_dir.empty()) {
        std::fprintf(stderr, "spawn_bench: %s: a library variant needs --state-dir first\n", v.name.c_str());
        return 2;
      }
      auto opened = [&]() -> Result<exec::OwnedExecutor> {
        auto pol = TRY(policy::load_effective(std::nullopt, policy_file));
        auto facts = exec::facts_for(pol, exec::HostProbe(state_dir));
        return exec::open_owned_executor(pol, facts, plan::Profile::Development, state_dir, std::nullopt, vm_pool);
      }();
      if (opened) {
        v.lib.emplace(std::move(*opened));
        if (built_ahead) v.lib->executor->keep_warm(true);
      } else
        v.unavailable = std::string(to_name(opened.error().code)) + ": " + opened.error().message;
    }
    vs.push_back(std::move(v));
  }
  if (vs.empty()) {
    std::fprintf(stderr, "usage: spawn_bench [--rounds N] [--warmup N] [--budget S] [--json] NAME=COMMAND...\n");
    return 2;
  }
  std::vector<Variant*> live;
  for (auto& v : vs)
    if (v.unavailable.empty()) live.push_back(&v);
  std::vector<double> warm_ms(vs.size(), 0);
  for (int r = 0; r < warmup; ++r)
    for (auto* v : live) {
      double ms = run_once(*v);
      warm_ms[static_cast<size_t>(v - vs.data())] += std::max(ms, 0.0);
    }
  // A slow variant (a whole VM, a node.js start-up) gets fewer runs under --budget, spread evenly
  // over the rounds so it still sees the same drift as the others.
  for (auto* v : live) {
    v->runs = static_cast<size_t>(rounds);
    double per_run_s = warmup ? warm_ms[static_cast<size_t>(v - vs.data())] / warmup / 1000 : 0;
    if (budget_s > 0 && per_run_s > 0)
      v->runs = std::clamp(static_cast<size_t>(budget_s / per_run_s), std::min(min_runs, v->runs), v->runs);
    v->failures = 0;
    if (v->client) v->server_ticks0 = server_usage(v->server).first;
    v->teardown_ms.clear();
    v->cpu_ms.clear();
    v->faults.clear();
  }
  // Interleaved: every round runs every variant due in it, so drift on a noisy machine hits all alike.
  for (size_t r = 0; r < static_cast<size_t>(rounds); ++r)
    for (auto* v : live) {
      if ((r + 1) * v->runs / static_cast<size_t>(rounds) == r * v->runs / static_cast<size_t>(rounds)) continue;
      double ms = run_once(*v);
      if (ms >= 0) v->ms.push_back(ms);
    }
  // A serve variant's CPU: the server's ticks over all its runs, spread evenly (see the usage).
  for (auto* v : live)
    if (v->client && !v->ms.empty()) {
      double ms = (server_usage(v->server).first - v->server_ticks0) * 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
      v->cpu_ms.assign(v->ms.size(), ms / static_cast<double>(v->ms.size()));
    }
  double base = pct(vs[0].ms, 0.5);
  if (json) std::printf("[");
  for (size_t i = 0; i < vs.size(); ++i) {
    auto& v = vs[i];
    double med = pct(v.ms, 0.5), p90 = pct(v.ms, 0.9);
    if (json) {
      std::printf("%s{\"name\":%s,\"library\":%s,\"runs\":%zu,\"failures\":%d", i ? "," : "",
                  json_text(v.name).c_str(), v.lib || !v.unavailable.empty() ? "true" : "false", v.ms.size(),
                  v.failures);
      if (!v.unavailable.empty()) std::printf(",\"unavailable\":%s", json_text(v.unavailable).c_str());
      if (v.failures) std::printf(",\"last_failure\":%s", json_text(v.last_failure).c_str());
      if (v.lib) std::printf(",\"teardown_median_ms\":%.4f", pct(v.teardown_ms, 0.5));
      std::printf(",\"cpu_median_ms\":%.4f,\"faults_median\":%.0f", pct(v.cpu_ms, 0.5), pct(v.faults, 0.5));
      std::printf(",\"median_ms\":%.4f,\"p10_ms\":%.4f,\"p90_ms\":%.4f,\"samples_ms\":[", med, pct(v.ms, 0.1), p90);
      for (size_t k = 0; k < v.ms.size(); ++k) std::printf("%s%.4f", k ? "," : "", v.ms[k]);
      std::printf("]}");
    } else if (!v.unavailable.empty()) {
      std::printf("%-28s unavailable: %s\n", v.name.c_str(), v.unavailable.c_str());
    } else {
      std::printf("%-28s median %8.3f ms  p90 %8.3f ms  x%-6.2f (+%.3f ms)  cpu %7.3f ms  faults %5.0f  runs %zu%s%s\n",
                  v.name.c_str(), med, p90, med / base, med - base, pct(v.cpu_ms, 0.5), pct(v.faults, 0.5),
                  v.ms.size(), v.failures ? "  FAILURES: " : "", v.failures ? v.last_failure.c_str() : "");
    }
  }
  if (json) std::printf("]\n");
  for (auto& v : vs)
    if (v.failures) return 1;
  return 0;
}
