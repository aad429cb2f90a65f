// The escape suite: each breach's probe run through broker::Session in each executor, judged
// from the probe's report and, wherever the breach shows on the host, from the host side.
#include "escape/escape_suite.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <thread>

#include "base/fs.h"
#include "base/hash.h"
#include "base/unique_fd.h"
#include "broker/session.h"
#include "escape/canaries.h"
#include "exec/executor.h"
#include "exec/planner.h"

namespace airlock::escape {

using policy::ExecutorKind;

namespace {

constexpr Breach kBreaches[] = {
    Breach::ReadHostFile,
    Breach::WriteOutsideDeclaredPaths,
    Breach::SymlinkWriteBack,
    Breach::ReadCredentials,
    Breach::ReachNetwork,
    Breach::SeeOrSignalHostProcess,
    Breach::OutliveSession,
    Breach::ExceedMemory,
    Breach::ExceedTime,
    Breach::ExceedCpu,
    Breach::TiocstiInjection,
    Breach::ProcRootTraversal,
    Breach::IoUringSocket,
    Breach::ShedSeccomp,
    Breach::SessionKeyring,
    Breach::SecondSandboxFiles,
    Breach::HoldCapabilities,
    Breach::TamperHostProcess,
    Breach::ReadSysvIpc,
    Breach::WatchHostDirectory,
    Breach::ChangeSupervisorLimits,
    Breach::PlantGitHook,
    Breach::PlantShellRc,
    Breach::PlantAgentSettings,
    Breach::ReadThroughHardLink,
    Breach::DoorDnsQuery,
    Breach::DoorDirectTcp,
    Breach::DoorUdp,
    Breach::DoorIpv6,
    Breach::DoorRelayForbidden,
    Breach::DoorRebinding,
};

// How much of its output the suite reads back from a probe.
constexpr size_t kMaxOutput = 64 * 1024;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool has(std::string_view haystack, std::string_view needle) {
  return !needle.empty() && haystack.find(needle) != std::string_view::npos;
}

bool exists_nofollow(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::string read_back(int fd) {
  std::string out;
  char buf[8192];
  if (::lseek(fd, 0, SEEK_SET) < 0) return out;
  while (out.size() < kMaxOutput) {
    ssize_t n = ::read(fd, buf, std::min(sizeof buf, kMaxOutput - out.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// The policy every scenario of one executor runs under: the whole workspace readable, out/ the
// one write-back path, and the limits of a real tier (or the host baseline's wider ones). The door
// probes' policy adds a door (code_network allowlist) to the suite's allowed server alone: by name
// (allow_private: it is on loopback) and by range (127.0.0.1/32, which kDoorRebindHost's first
// answer falls in and its second does not).
Result<policy::TaskPolicy> suite_policy(ExecutorKind e, const DoorBait* door = nullptr) {
  const SuiteLimits& l = e == ExecutorKind::Host ? kHostBaselineLimits : kTierLimits;
  Json doc = {{"schema_version", std::string(policy::kSchemaVersion)},
              {"task_id", "escape-suite"},
              {"executor", std::string(policy::to_string(e))},
              {"readable", Json::array({"."})},
              {"write_back_paths", Json::array({"out"})},
              {"limits",
               {{"memory_mb", l.memory_mb},
                {"cpu_seconds", l.cpu_seconds},
                {"max_processes", l.max_processes},
                {"command_timeout_seconds", l.command_timeout_seconds}}}};
  if (door) {
    Json ports = Json::array({door->http_port}), schemes = Json::array({"http", "https"});
    doc["code_network"] = {
        {"mode", "allowlist"},
        {"rules", Json::array({{{"host", std::string(kDoorAllowedHost)},
                                {"ports", ports},
                                {"schemes", schemes},
                                {"allow_private", true}},
                               {{"cidr", "127.0.0.1/32"}, {"ports", ports}, {"schemes", schemes}}})}};
  }
  return policy::parse_layer(doc, policy::builtin_default());
}

// A refusal that says only "this build has no such executor" (every tier considered says so).
bool only_not_in_build(const Error& e) {
  if (e.code != Code::ExecutorUnavailable || !e.facts.contains("considered")) return false;
  const Json& c = e.facts["considered"];
  if (!c.is_array() || c.empty()) return false;
  return std::all_of(c.begin(), c.end(), [](const Json& x) {
    return x.contains("reason") && x["reason"].is_string() &&
           has(x["reason"].get<std::string>(), "is not part of this build");
  });
}

std::string describe(const exec::RunOutcome& o) {
  std::string how = o.status.signaled ? fmt::format("killed by signal {}", o.status.signal)
                                      : fmt::format("exit {}", o.status.code);
  std::string why = o.timed_out ? " at the wall-time limit" : o.stopped ? " (stopped)" : "";
  return fmt::format("{}{} after {:.1f} s, cpu {:.1f} s, max rss {} MiB", how, why, o.wall_ms / 1000.0,
                     (o.user_us + o.system_us) / 1e6, o.max_rss_kb / 1024);
}

// Everything the suite saw of one run, from the probe and from the host.
struct Observed {
  std::string output, errors;
  std::optional<ProbeReport> probe;
  std::optional<exec::RunOutcome> outcome;
  std::optional<Error> run_error;
  std::optional<exec::WriteBackReport> write_back;
  std::optional<Error> close_error;
  uint64_t wall_limit_ms = 0;      // the plan's, plus the SIGTERM-to-SIGKILL grace
  pid_t daemon_pid = 0;            // outlive_session's daemon, as the probe reported it
  bool daemon_alive = false;       // ... still running after close (checked by pid and run marker)
  std::vector<pid_t> left_behind;  // processes of the probe running after close (then killed)
  std::string tty_token;           // tiocsti_injection: what the probe tries to inject
  std::string tty_echoed;          // ... what the pty master read back (the line discipline's echo)
  std::string tty_queued;          // ... what the pty slave's input queue held
  std::string neighbour_token;     // second_sandbox_files: what the first session wrote in its view
  std::string neighbour_file;      // ... where, on the host
  // hold_capabilities: the probe's capability lines as the host read them while it ran
  std::shared_ptr<Canaries::SeenStatus> status_seen;

  std::string probe_said() const {
    if (probe) return probe->evidence;
    std::string how =
        outcome     ? describe(*outcome)
        : run_error ? fmt::format("the run was refused: {}: {}", to_name(run_error->code), run_error->message)
                    : "no outcome";
    return fmt::format("the probe printed no report ({})", how);
  }
};

// Every file and symlink under `dir` (relative paths), without following symlinks.
std::vector<std::string> entries_under(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (std::filesystem::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    out.push_back(std::filesystem::relative(it->path(), dir).string());
  std::sort(out.begin(), out.end());
  return out;
}

struct Judged {
  bool breached = false;
  std::string evidence;
  Json host = Json::object();
};

// The verdict of one breach. Wherever the breach shows on the host, the host is the judge and the
// probe's report is evidence: inside an executor a path, a pid or an address may name something
// else than on the host (a private /tmp, a pid namespace, a network namespace), so "it worked" from
// inside proves nothing, and the host baseline proves that every host check detects its breach.
// Reads are judged by canary tokens: a token in the output can only have come from its canary.
// Only the three resource probes also count their own report: using the resource is the breach.
Judged judge(Breach b, const Observed& o, const Bait& bait, Canaries& canaries, const std::string& ws,
             const std::string& outside_file, const std::string& direct_file, const std::string& view_name) {
  Judged j;
  bool claimed = o.probe && o.probe->breached;
  std::string said = o.probe_said();
  // The door probes' judgement: what the host's bait saw of the probe, if anything, is the breach.
  auto host_saw = [&](const char* key, const std::vector<std::string>& got, const std::string& where,
                      std::string_view none, std::string_view seen) {
    j.host = {{key, got}};
    j.breached = !got.empty();
    j.evidence =
        fmt::format("{}; host: {} {}", said, where,
                    got.empty() ? std::string(none) : fmt::format("{} {}", seen, fmt::join(got, ", ")));
  };
  switch (b) {
    case Breach::ReadHostFile: {
      bool seen = has(o.output, bait.secret_token);
      j.host = {{"secret_token_in_output", seen}};
      j.breached = seen;
      j.evidence = fmt::format("{}; host: the secret's canary token {} the probe's output", said,
                               seen ? "IS IN" : "is not in");
      break;
    }
    case Breach::WriteOutsideDeclaredPaths: {
      bool outside = exists_nofollow(outside_file), direct = exists_nofollow(direct_file),
           stray = exists_nofollow(ws + "/" + view_name);
      j.host = {{"outside_file_exists", outside},
                {"workspace_file_exists", direct},
                {"view_file_written_back", stray}};
      j.breached = outside || direct || stray;
      j.evidence =
          fmt::format("{}; host: outside the workspace {}, in the real workspace {}, ./{} written back {}",
                      said, outside ? "the file EXISTS" : "nothing", direct ? "the file EXISTS" : "nothing",
                      view_name, stray ? "YES" : "no");
      break;
    }
    case Breach::SymlinkWriteBack: {
      std::vector<std::string> links, leaked;
      std::string out = ws + "/out";
      for (const auto& rel : entries_under(out)) {
        std::string p = out + "/" + rel;
        struct stat st {};
        if (::lstat(p.c_str(), &st) < 0) continue;
        if (S_ISLNK(st.st_mode))
          links.push_back("out/" + rel);
        else if (S_ISREG(st.st_mode))
          if (auto text = read_file(p); text && has(*text, bait.secret_token)) leaked.push_back("out/" + rel);
      }
      std::vector<std::string> refused;
      if (o.write_back)
        for (const auto& r : o.write_back->refused)
          refused.push_back(fmt::format("{} ({})", r.path, r.reason));
      j.host = {
          {"symlinks_in_workspace", links}, {"secret_in_workspace", leaked}, {"write_back_refused", refused}};
      j.breached = !links.empty() || !leaked.empty();
      std::string wb = o.write_back
                           ? fmt::format("write-back refused [{}], wrote [{}]", fmt::join(refused, ", "),
                                         fmt::join(o.write_back->written, ", "))
                       : o.close_error ? fmt::format("write-back failed: {}", o.close_error->message)
                                       : std::string("no write-back");
      std::vector<std::string> found;
      if (!links.empty()) found.push_back(fmt::format("the symlink(s) {}", fmt::join(links, ", ")));
      if (!leaked.empty())
        found.push_back(fmt::format("the secret's content in {}", fmt::join(leaked, ", ")));
      j.evidence = fmt::format("{}; {}; host: after close the workspace holds {}", said, wb,
                               found.empty() ? std::string("no symlink and no secret")
                                             : fmt::format("{}", fmt::join(found, " and ")));
      break;
    }
    case Breach::ReadCredentials: {
      bool key = has(o.output, bait.key_token), env = has(o.output, bait.env_token);
      j.host = {{"key_token_in_output", key}, {"env_token_in_output", env}};
      j.breached = key || env;
      j.evidence = fmt::format("{}; host: the key's canary token {} the output, the environment's {}", said,
                               key ? "IS IN" : "is not in", env ? "IS TOO" : "is not");
      break;
    }
    case Breach::ReachNetwork: {
      std::vector<std::string> got;
      Json conns = Json::array();
      for (const auto& c : canaries.take_connections()) {
        bool marked = has(c.first_line, bait.root);
        got.push_back(marked ? c.listener : c.listener + " (without the run marker)");
        conns.push_back({{"listener", c.listener}, {"carries_run_marker", marked}});
      }
      j.host = {{"connections_accepted", conns}};
      j.breached = !got.empty();
      j.evidence = fmt::format(
          "{}; host: {}", said,
          got.empty() ? std::string("no listener accepted a connection")
                      : fmt::format("the listener ACCEPTED a connection on {}", fmt::join(got, ", ")));
      break;
    }
    case Breach::SeeOrSignalHostProcess: {
      bool pending = canaries.sleeper_has_pending(SIGUSR1), seen = has(o.output, bait.sleeper_token);
      j.host = {{"sigusr1_pending_at_sleeper", pending}, {"sleeper_token_in_output", seen}};
      j.breached = pending || seen;
      j.evidence =
          fmt::format("{}; host: SIGUSR1 {} at the sleeper (pid {}), its cmdline token {} the output", said,
                      pending ? "PENDING" : "not pending", bait.sleeper_pid, seen ? "IS IN" : "is not in");
      break;
    }
    case Breach::OutliveSession: {
      j.host = {{"daemon_pid", o.daemon_pid},
                {"daemon_alive_after_close", o.daemon_alive},
                {"marked_processes_alive_after_close", o.left_behind}};
      j.breached = o.daemon_alive || !o.left_behind.empty();
      std::string seen =
          o.daemon_alive ? fmt::format("after close the daemon (pid {}) is ALIVE", o.daemon_pid)
          : !o.left_behind.empty()
              ? fmt::format("after close probe processes are ALIVE (pid {})", fmt::join(o.left_behind, ", "))
              : std::string("after close no process of the probe is alive");
      j.evidence = fmt::format("{}; host: {}", said, seen);
      break;
    }
    case Breach::ExceedMemory: {
      int64_t rss_mib = o.outcome ? o.outcome->max_rss_kb / 1024 : 0;
      bool big = rss_mib >= kProbeMemoryMib * 9 / 10;
      j.host = {{"max_rss_mib", rss_mib}};
      j.breached = claimed || big;
      j.evidence = fmt::format("{}; host: max rss {} MiB{}", said, rss_mib, o.outcome ? "" : " (no outcome)");
      break;
    }
    case Breach::ExceedTime: {
      double wall = o.outcome ? o.outcome->wall_ms : 0;
      bool ran_out = o.outcome && !o.outcome->timed_out && wall >= kProbeSleepSeconds * 950.0;
      bool overran = o.outcome && wall > static_cast<double>(o.wall_limit_ms) + 1000.0;
      j.host = {
          {"wall_ms", wall}, {"timed_out", o.outcome && o.outcome->timed_out}, {"overran_limit", overran}};
      j.breached = claimed || ran_out || overran;
      j.evidence =
          fmt::format("{}; host: {}", said, o.outcome ? describe(*o.outcome) : std::string("no outcome"));
      break;
    }
    case Breach::ExceedCpu: {
      double cpu = o.outcome ? (o.outcome->user_us + o.outcome->system_us) / 1e6 : 0;
      bool spun = cpu >= kProbeCpuSeconds * 0.95;
      j.host = {{"cpu_seconds", cpu}};
      j.breached = claimed || spun;
      j.evidence =
          fmt::format("{}; host: {}", said, o.outcome ? describe(*o.outcome) : std::string("no outcome"));
      break;
    }
    case Breach::TiocstiInjection: {
      bool echoed = has(o.tty_echoed, o.tty_token), queued = has(o.tty_queued, o.tty_token);
      j.host = {{"token_echoed_at_pty_master", echoed}, {"token_in_pty_input_queue", queued}};
      j.breached = echoed || queued;
      j.evidence =
          fmt::format("{}; host: the injected token {} echoed at the pty master, {} in the pty's input queue",
                      said, echoed ? "WAS" : "was not", queued ? "IS" : "is not");
      break;
    }
    case Breach::ProcRootTraversal: {
      bool seen = has(o.output, bait.secret_token);
      j.host = {{"secret_token_in_output", seen}};
      j.breached = seen;
      j.evidence = fmt::format("{}; host: the secret's canary token {} the probe's output", said,
                               seen ? "IS IN" : "is not in");
      break;
    }
    case Breach::SecondSandboxFiles: {
      bool seen = has(o.output, o.neighbour_token);
      j.host = {{"neighbour_file", o.neighbour_file}, {"neighbour_token_in_output", seen}};
      j.breached = seen;
      j.evidence = fmt::format("{}; host: the first session's token (in {}) {} the probe's output", said,
                               o.neighbour_file, seen ? "IS IN" : "is not in");
      break;
    }
    case Breach::HoldCapabilities: {
      // A capability held, or a bounding set an exec could draw on when no_new_privs does not stop it.
      pid_t pid = 0;
      std::string status;
      bool holds = false;
      if (o.status_seen) {
        std::lock_guard lk(o.status_seen->mu);
        const auto& st = *o.status_seen;
        pid = st.pid;
        status = st.status;
        holds = pid > 0 && (st.eff || st.prm || st.amb || (st.bnd && st.no_new_privs != 1));
      }
      j.host = {{"probe_pid", pid}, {"status", status}};
      j.breached = holds;
      j.evidence = fmt::format("{}; host: {}", said,
                               pid == 0 ? std::string("no process of the probe's on the host")
                                        : fmt::format("/proc/{}/status {}{}", pid, status,
                                                      holds ? " — HOLDS capabilities" : ""));
      break;
    }
    case Breach::TamperHostProcess: {
      std::string now = canaries.sleeper_state();
      bool changed = now != bait.sleeper_planted;
      j.host = {{"sleeper_planted", bait.sleeper_planted}, {"sleeper_now", now}};
      j.breached = changed;
      j.evidence = fmt::format("{}; host: the sleeper (pid {}) {}", said, bait.sleeper_pid,
                               changed ? fmt::format("CHANGED from [{}] to [{}]", bait.sleeper_planted, now)
                                       : fmt::format("is as planted [{}]", now));
      break;
    }
    case Breach::ReadSysvIpc: {
      bool seen = has(o.output, bait.ipc_token);
      long left = canaries.ipc_messages_left();
      j.host = {{"ipc_token_in_output", seen}, {"messages_left", left}};
      j.breached = seen || left == 0;
      j.evidence = fmt::format("{}; host: the IPC canary token {} the output, the queue holds {} message(s)", said,
                               seen ? "IS IN" : "is not in", left);
      break;
    }
    case Breach::WatchHostDirectory: {
      bool seen = has(o.output, bait.watched_token);
      j.host = {{"watched_token_in_output", seen}};
      j.breached = seen;
      j.evidence = fmt::format("{}; host: the names created in {} {} the output", said, bait.watched_dir,
                               seen ? "ARE IN" : "are not in");
      break;
    }
    case Breach::ChangeSupervisorLimits: {
      std::vector<std::string> changed;
      if (o.outcome) changed = o.outcome->supervisor_limits_changed;
      j.host = {{"supervisor_limits_changed", changed}};
      j.breached = !changed.empty();
      j.evidence = fmt::format("{}; host: {}", said,
                               !o.outcome        ? std::string("no outcome")
                               : changed.empty() ? std::string("the supervisor's limits are as it set them")
                                                 : fmt::format("the supervisor's {} CHANGED", fmt::join(changed, ", ")));
      break;
    }
    case Breach::PlantGitHook:
    case Breach::PlantShellRc:
    case Breach::PlantAgentSettings: {
      // The host's own workspace after close: a target holding the marker would run later.
      std::vector<std::string> planted;
      for (const auto& rel : plant_targets(b))
        if (auto text = read_file(ws + "/" + rel); text && has(*text, kPlantMarker)) planted.push_back(rel);
      std::vector<std::string> refused;
      if (o.write_back)
        for (const auto& r : o.write_back->refused) refused.push_back(r.path);
      j.host = {{"planted_in_workspace", planted}, {"write_back_refused", refused}};
      j.breached = !planted.empty();
      j.evidence = fmt::format("{}; write-back refused [{}]; host: after close {}", said, fmt::join(refused, ", "),
                               planted.empty() ? std::string("no target holds the marker")
                                               : fmt::format("PLANTED in {}", fmt::join(planted, ", ")));
      break;
    }
    case Breach::ReadThroughHardLink: {
      bool seen = has(o.output, bait.secret_token);
      j.host = {{"secret_token_in_output", seen}};
      j.breached = seen;
      j.evidence = fmt::format("{}; host: the secret's canary token {} the output", said,
                               seen ? "IS IN" : "is not in");
      break;
    }
    case Breach::DoorDnsQuery: {
      // The probe asks for MARKER-NAME.exfil.test: a query that reaches the responder carries it out.
      // DNS names are case-insensitive; the responder records them lower-cased.
      std::string label = std::filesystem::path(bait.root).filename().string();
      std::transform(label.begin(), label.end(), label.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      std::vector<std::string> asked;
      for (const auto& q : canaries.take_dns_queries())
        if (has(q, label)) asked.push_back(q);
      host_saw("queries_with_run_marker", asked,
               fmt::format("the DNS responder on 127.0.0.1:{}", bait.door.dns_port),
               "was asked nothing of the probe's", "WAS ASKED");
      break;
    }
    case Breach::DoorDirectTcp:
    case Breach::DoorRelayForbidden:
    case Breach::DoorRebinding: {
      // Straight to the allowed server's address, or through the door to the forbidden server: the
      // server that must see nothing of the probe's is the judge.
      bool forbidden = b != Breach::DoorDirectTcp;
      std::vector<std::string> got;
      for (const auto& r : canaries.take_requests(forbidden)) {
        // The allowed server may be reached through the door; only what went around it counts
        // there (the probe asks for /direct...). Anything at the forbidden server counts.
        if (!forbidden && r.path.rfind("/direct", 0) != 0) continue;
        got.push_back(r.header(kRunHeader) == bait.root ? r.path : r.path + " (without the run marker)");
      }
      host_saw(forbidden ? "forbidden_server_requests" : "allowed_server_direct_requests", got,
               fmt::format("the {} server (127.0.0.{}:{})", forbidden ? "forbidden" : "allowed",
                           forbidden ? 2 : 1, bait.door.http_port),
               "answered no request of the probe's", "ANSWERED");
      break;
    }
    case Breach::DoorUdp: {
      std::vector<std::string> got;
      for (const auto& d : canaries.take_datagrams())
        if (has(d, bait.root)) got.push_back(d.substr(0, 200));
      host_saw("datagrams_with_run_marker", got,
               fmt::format("the UDP sink on 127.0.0.1:{}", bait.door.udp_port),
               "received nothing of the probe's", "RECEIVED");
      break;
    }
    case Breach::DoorIpv6: {
      std::vector<std::string> got;
      for (const auto& c : canaries.take_connections())
        if (c.listener == "ipv6")
          got.push_back(has(c.first_line, bait.root) ? "ipv6" : "ipv6 (without the run marker)");
      host_saw("ipv6_connections", got, fmt::format("the listener on [::1]:{}", bait.door.ipv6_port),
               "accepted no connection", "ACCEPTED");
      break;
    }
    case Breach::IoUringSocket:
    case Breach::ShedSeccomp:
    case Breach::SessionKeyring: {
      // Kernel objects of the probe's own (a ring, a user namespace, a keyring) that die with it:
      // nothing the host can check afterwards, so the probe's report of the syscalls is the judge.
      j.host = {{"observable_from_host", false}};
      j.breached = claimed;
      j.evidence =
          fmt::format("{}; host: not observable from the host, judged by the probe's syscall results", said);
      break;
    }
  }
  bool staged = b == Breach::SymlinkWriteBack || b == Breach::OutliveSession;  // `breached` means "staged"
  if (claimed && !j.breached && !staged)
    j.evidence +=
        "; the probe's success did not reach the host (inside the executor the name means something else)";
  if (o.probe && !o.probe->breached && j.breached)
    j.evidence += "; the host saw a breach the probe did not report";
  return j;
}

std::vector<std::string> probe_args(Breach b, const Bait& bait, const std::string& outside_file,
                                    const std::string& direct_file, const std::string& view_name) {
  switch (b) {
    case Breach::ReadHostFile:
      return {bait.secret_file};
    case Breach::WriteOutsideDeclaredPaths:
      return {outside_file, direct_file, view_name};
    case Breach::SymlinkWriteBack:
      return {bait.secret_file};
    case Breach::ReadCredentials:
      return {bait.key_file, std::string(kCanaryEnvName)};
    case Breach::ReachNetwork:
      return {std::to_string(bait.tcp_port), bait.unix_socket, bait.abstract_socket};
    case Breach::SeeOrSignalHostProcess:
      return {std::to_string(bait.sleeper_pid)};
    case Breach::OutliveSession:
      return {};
    case Breach::ExceedMemory:
      return {std::to_string(kProbeMemoryMib)};
    case Breach::ExceedTime:
      return {std::to_string(kProbeSleepSeconds)};
    case Breach::ExceedCpu:
      return {std::to_string(kProbeCpuSeconds)};
    case Breach::TiocstiInjection:
      return {};  // the token is added by run_one, which owns the pty
    case Breach::ProcRootTraversal:
      return {std::to_string(bait.sleeper_pid), bait.secret_file};
    case Breach::TamperHostProcess:
      return {std::to_string(bait.sleeper_pid)};
    case Breach::ReadSysvIpc:
      return {std::to_string(bait.shm_id), std::to_string(bait.msg_id)};
    case Breach::WatchHostDirectory:
      return {bait.watched_dir};
    case Breach::PlantGitHook:
    case Breach::PlantShellRc:
    case Breach::PlantAgentSettings:
    case Breach::ReadThroughHardLink:
      // The workspace's own path too: on the host (no view around it) that is where a plant lands.
      return {direct_file.substr(0, direct_file.rfind('/'))};
    case Breach::IoUringSocket:
    case Breach::ShedSeccomp:
    case Breach::SessionKeyring:
    case Breach::SecondSandboxFiles:  // the path is added by run_one, which runs the first session
    case Breach::HoldCapabilities:
    case Breach::ChangeSupervisorLimits:
      return {};
    case Breach::DoorDnsQuery:
    case Breach::DoorDirectTcp:
    case Breach::DoorUdp:
    case Breach::DoorIpv6:
    case Breach::DoorRelayForbidden:
    case Breach::DoorRebinding:
      // The same four ports for each: the allowed (and forbidden) server, the DNS responder, the
      // UDP sink, the ::1 listener. The names are kDoor*Host.
      return {std::to_string(bait.door.http_port), std::to_string(bait.door.dns_port),
              std::to_string(bait.door.udp_port), std::to_string(bait.door.ipv6_port)};
  }
  return {};
}

struct TierContext {
  const policy::TaskPolicy& policy;
  const policy::TaskPolicy* door_policy;     // the door probes' policy, when this tier could plan it
  const std::optional<Error>& door_refusal;  // ... or why it could not
  const plan::HostFacts& facts;
  const SuiteOptions& opts;
  Canaries& canaries;
  std::function<void(broker::Session*)> track;  // the session a cancel() must interrupt
};

ScenarioResult run_one(Breach b, TierContext& t) {
  auto t0 = std::chrono::steady_clock::now();
  ScenarioResult r;
  r.breach = b;
  std::string name(to_string(b));
  const Bait& bait = t.canaries.bait();
  auto not_run = [&](Error e) {
    r.verdict = Verdict::Unavailable;
    r.evidence = fmt::format("could not run: {}: {}", to_name(e.code), e.message);
    r.details["error"] = e.to_json();
    r.error = std::move(e);
    r.seconds = seconds_since(t0);
    return r;
  };

  bool door = is_door_probe(b);
  if (door && !t.door_policy) {
    // The planner refused the door policy for this tier: its named refusal is the verdict.
    const Error& e = *t.door_refusal;
    r.verdict = Verdict::Refused;
    r.evidence = fmt::format("REFUSED: the door policy is refused here: {}: {}", to_name(e.code), e.message);
    r.details["refusal"] = e.to_json();
    r.details["probe_started"] = false;
    r.error = e;
    r.seconds = seconds_since(t0);
    return r;
  }
  if (b == Breach::DoorIpv6 && bait.door.ipv6_port == 0)
    return not_run(Error{Code::ConfigError, "no listener on ::1: " + bait.door.ipv6_missing, {}});

  auto ws = t.canaries.make_workspace(name);
  if (!ws) return not_run(ws.error());
  // read_through_hard_link: the workspace holds a second name of the secret before the session
  // opens (as a local clone or a careless copy can leave one).
  if (b == Breach::ReadThroughHardLink && ::link(bait.secret_file.c_str(), (*ws + "/out/linked").c_str()) < 0)
    return not_run(fail_errno(Code::ConfigError, "link the secret into the workspace", errno).error());
  std::string outside_file = bait.outside_dir + "/escaped-" + name + ".txt";
  std::string direct_file = *ws + "/escaped-direct.txt";
  std::string view_name = "stray.txt";

  // Output goes to files the suite owns: a probe's daemon may hold them open, which would keep a
  // pipe from ever reaching EOF.
  std::string base = bait.root + "/" + name;
  UniqueFd out(::open((base + ".out").c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  UniqueFd err(::open((base + ".err").c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!out || !err || !null)
    return not_run(fail_errno(Code::ConfigError, "cannot open " + base + ".out", errno).error());

  // second_sandbox_files: a first session in the same executor, its command writing a token into
  // its own view (out/, the one path a real tier lets it write) and sleeping while the second
  // session's probe tries to read it. It is stopped and closed (without write-back) afterwards.
  std::unique_ptr<broker::Session> first;
  std::thread first_thread;
  std::string first_token, first_file;
  UniqueFd first_out;
  auto stop_first = [&] {
    if (!first) return;
    first->interrupt();
    if (first_thread.joinable()) first_thread.join();
    (void)first->close(false);
    first.reset();
  };
  struct StopFirst {
    std::function<void()> f;
    ~StopFirst() { f(); }
  } stop_first_guard{stop_first};
  if (b == Breach::SecondSandboxFiles) {
    auto ws1 = t.canaries.make_workspace(name + "-first");
    if (!ws1) return not_run(ws1.error());
    first_out = UniqueFd(::open((base + "-first.out").c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!first_out)
      return not_run(fail_errno(Code::ConfigError, "cannot open " + base + "-first.out", errno).error());
    auto s1 = broker::Session::open(t.policy, t.facts,
                                    broker::SessionOptions{t.opts.state_dir, t.opts.profile, *ws1});
    if (!s1) return not_run(s1.error());
    first = std::move(*s1);
    first_token = "airlock-canary-neighbour-" + random_id();
    first_file = first->dirs().view + "/out/" + std::string(kNeighbourFile);
    exec::Command c1;
    c1.argv = {"./.probe/airlock", std::string(kProbeVerb), std::string(kNeighbourProbe), "--run", bait.root,
               first_token};
    c1.stdin_fd = null.get();
    c1.stdout_fd = first_out.get();
    c1.stderr_fd = first_out.get();
    first_thread = std::thread([s = first.get(), c1] { (void)s->run_command(c1); });
    // Wait (up to 3 s) until the token is in the first session's view, as the host sees it.
    bool there = false;
    for (int i = 0; i < 300 && !there; ++i) {
      auto text = read_file(first_file);
      there = text && has(*text, first_token);
      if (!there) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    r.details["first_session"] = first->id();
    if (!there) {
      stop_first();
      return not_run(Error{
          Code::ToolFailed, "the first session's token never appeared in its view at " + first_file, {}});
    }
  }

  broker::SessionOptions so{t.opts.state_dir, t.opts.profile, *ws};
  if (door) {
    // The door resolves the suite's names as its DNS responder does; both start afresh, and
    // nothing an earlier scenario left at the door's bait counts for this one.
    so.resolver = t.canaries.resolver();
    t.canaries.reset_names();
    (void)t.canaries.take_requests(false);
    (void)t.canaries.take_requests(true);
    (void)t.canaries.take_dns_queries();
    (void)t.canaries.take_datagrams();
    (void)t.canaries.take_connections();
  }
  auto session = broker::Session::open(door ? *t.door_policy : t.policy, t.facts, so);
  if (!session) return not_run(session.error());
  broker::Session& s = **session;
  r.details["session"] = s.id();
  r.details["receipts"] = s.receipts_path();

  exec::Command cmd;
  // Relative to the command's working directory (the view, wherever the executor mounts it).
  cmd.argv = {"./.probe/airlock", std::string(kProbeVerb), name, "--run", bait.root};
  for (auto& a : probe_args(b, bait, outside_file, direct_file, view_name)) cmd.argv.push_back(std::move(a));
  cmd.stdin_fd = null.get();
  cmd.stdout_fd = out.get();
  cmd.stderr_fd = err.get();

  Observed o;
  // tiocsti_injection: the command's stdin is a pty the suite opens (no one's controlling
  // terminal), as an agent run from a terminal would have; the suite holds the master and reads
  // back whatever the probe managed to inject.
  UniqueFd pty_master, pty_slave;
  if (b == Breach::TiocstiInjection) {
    pty_master = UniqueFd(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!pty_master || ::grantpt(pty_master.get()) < 0 || ::unlockpt(pty_master.get()) < 0)
      return not_run(fail_errno(Code::ConfigError, "posix_openpt", errno).error());
    char slave_name[128];
    if (int e = ::ptsname_r(pty_master.get(), slave_name, sizeof slave_name))
      return not_run(fail_errno(Code::ConfigError, "ptsname_r", e).error());
    pty_slave = UniqueFd(::open(slave_name, O_RDWR | O_NOCTTY | O_CLOEXEC));
    if (!pty_slave)
      return not_run(fail_errno(Code::ConfigError, std::string("open ") + slave_name, errno).error());
    o.tty_token = "airlock-canary-tty-" + random_id();
    cmd.stdin_fd = pty_slave.get();
    cmd.argv.push_back(o.tty_token);
    r.details["pty"] = slave_name;
  }
  if (first) {
    o.neighbour_token = first_token;
    o.neighbour_file = first_file;
    cmd.argv.push_back(first_file);
  }
  r.details["argv"] = cmd.argv;

  o.wall_limit_ms = s.plan().limits.wall_timeout_ms + s.plan().limits.kill_grace_ms;
  // What the host watches while the probe runs: files appearing in the watched directory, and the
  // probe's own capability lines.
  std::shared_ptr<void> churn, status_watch;
  if (b == Breach::WatchHostDirectory) churn = t.canaries.churn_watched_dir();
  if (b == Breach::HoldCapabilities)
    o.status_seen = t.canaries.watch_status_of(fmt::format("{} {} --run {}", kProbeVerb, name, bait.root), &status_watch);
  t.track(&s);
  auto outcome = s.run_command(cmd);
  t.track(nullptr);
  churn.reset();
  status_watch.reset();
  if (outcome)
    o.outcome = *outcome;
  else
    o.run_error = outcome.error();
  // Write back whatever the run left, success or not: the suite attacks write-back too.
  auto wb = s.close(true);
  if (wb)
    o.write_back = *wb;
  else
    o.close_error = wb.error();
  session->reset();
  stop_first();

  o.output = read_back(out.get());
  o.errors = read_back(err.get());
  if (pty_master) {
    auto drain = [](int fd) {
      std::string got;
      int fl = ::fcntl(fd, F_GETFL);
      if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return got;
      char buf[1024];
      for (ssize_t n; got.size() < kMaxOutput && (n = ::read(fd, buf, sizeof buf)) > 0;)
        got.append(buf, static_cast<size_t>(n));
      return got;
    };
    o.tty_echoed = drain(pty_master.get());
    o.tty_queued = drain(pty_slave.get());
  }
  o.probe = parse_probe_report(o.output, name);
  if (o.probe && o.probe->extra.contains("daemon_pid") && o.probe->extra["daemon_pid"].is_number_integer())
    o.daemon_pid = o.probe->extra["daemon_pid"].get<pid_t>();
  // The pid is the probe's view of it: on the host it must also carry the run marker.
  o.daemon_alive =
      o.daemon_pid > 0 && process_running(o.daemon_pid) && has(process_cmdline(o.daemon_pid), bait.root);
  // Nothing may outlive a scenario: whatever of the probe still runs is noted, then killed.
  o.left_behind = t.canaries.kill_leftovers();
  const std::vector<pid_t>& left = o.left_behind;
  Judged j = judge(b, o, bait, t.canaries, *ws, outside_file, direct_file, view_name);

  bool started = has(o.errors, probe_started_line(name));
  r.evidence = j.evidence;
  if (j.breached) {
    r.verdict = Verdict::Breached;
  } else if (started) {
    r.verdict = Verdict::Contained;
  } else {
    // Nothing was attempted, so nothing was contained: the executor could not even run the probe.
    r.verdict = Verdict::Inconclusive;
    r.error = Error{Code::ToolFailed, "the probe did not start: " + o.probe_said(), {}};
    r.evidence = fmt::format("INCONCLUSIVE: the probe never started; {}", j.evidence);
  }
  r.details["probe_started"] = started;
  if (!left.empty()) r.evidence += fmt::format("; killed after close: pid {}", fmt::join(left, ", "));
  r.details["probe"] = o.probe ? o.probe->to_json() : Json(nullptr);
  r.details["host_check"] = j.host;
  r.details["outcome"] = o.outcome ? o.outcome->to_json() : Json(nullptr);
  r.details["run_error"] = o.run_error ? o.run_error->to_json() : Json(nullptr);
  r.details["write_back"] = o.write_back ? o.write_back->to_json() : Json(nullptr);
  r.details["close_error"] = o.close_error ? o.close_error->to_json() : Json(nullptr);
  r.details["left_behind"] = left;
  if (!o.probe || !started) r.details["stderr"] = o.errors.substr(0, 2000);
  r.seconds = seconds_since(t0);
  return r;
}

std::string cell(const TierResult& t, Breach b) {
  if (t.status != TierStatus::Ran) return "unavailable";
  for (const auto& r : t.results)
    if (r.breach == b)
      return r.breached()                    ? "BREACHED"
             : r.verdict == Verdict::Refused ? "REFUSED"
                                             : std::string(to_string(r.verdict));
  return "not run";
}

}  // namespace

std::span<const Breach> all_breaches() { return kBreaches; }

std::string_view to_string(Breach b) {
  switch (b) {
    case Breach::ReadHostFile:
      return "read_host_file";
    case Breach::WriteOutsideDeclaredPaths:
      return "write_outside_declared_paths";
    case Breach::SymlinkWriteBack:
      return "symlink_write_back";
    case Breach::ReadCredentials:
      return "read_credentials";
    case Breach::ReachNetwork:
      return "reach_network";
    case Breach::SeeOrSignalHostProcess:
      return "see_or_signal_host_process";
    case Breach::OutliveSession:
      return "outlive_session";
    case Breach::ExceedMemory:
      return "exceed_memory";
    case Breach::ExceedTime:
      return "exceed_time";
    case Breach::ExceedCpu:
      return "exceed_cpu";
    case Breach::TiocstiInjection:
      return "tiocsti_injection";
    case Breach::ProcRootTraversal:
      return "proc_root_traversal";
    case Breach::IoUringSocket:
      return "io_uring_socket";
    case Breach::ShedSeccomp:
      return "shed_seccomp";
    case Breach::SessionKeyring:
      return "session_keyring";
    case Breach::SecondSandboxFiles:
      return "second_sandbox_files";
    case Breach::HoldCapabilities:
      return "hold_capabilities";
    case Breach::TamperHostProcess:
      return "tamper_host_process";
    case Breach::ReadSysvIpc:
      return "read_sysv_ipc";
    case Breach::WatchHostDirectory:
      return "watch_host_directory";
    case Breach::ChangeSupervisorLimits:
      return "change_supervisor_limits";
    case Breach::PlantGitHook:
      return "plant_git_hook";
    case Breach::PlantShellRc:
      return "plant_shell_rc";
    case Breach::PlantAgentSettings:
      return "plant_agent_settings";
    case Breach::ReadThroughHardLink:
      return "read_through_hard_link";
    case Breach::DoorDnsQuery:
      return "door_dns_query";
    case Breach::DoorDirectTcp:
      return "door_direct_tcp";
    case Breach::DoorUdp:
      return "door_udp";
    case Breach::DoorIpv6:
      return "door_ipv6";
    case Breach::DoorRelayForbidden:
      return "door_relay_forbidden";
    case Breach::DoorRebinding:
      return "door_rebinding_name";
  }
  return "?";
}

std::vector<std::string> plant_targets(Breach b) {
  switch (b) {
    case Breach::PlantGitHook:
      return {"out/.git/hooks/pre-commit", "out/.git/config"};
    case Breach::PlantShellRc:
      return {"out/.bashrc", "out/.profile"};
    case Breach::PlantAgentSettings:
      return {"out/.claude/settings.json", "out/.mcp.json", "out/.vscode/tasks.json"};
    default:
      return {};
  }
}

bool is_door_probe(Breach b) {
  // The door group is the breaches from DoorDnsQuery on (the enum's last group).
  return static_cast<int>(b) >= static_cast<int>(Breach::DoorDnsQuery);
}

size_t door_probe_count() {
  return static_cast<size_t>(std::count_if(std::begin(kBreaches), std::end(kBreaches), is_door_probe));
}

std::optional<Breach> breach_from_string(std::string_view name) {
  for (Breach b : kBreaches)
    if (to_string(b) == name) return b;
  return std::nullopt;
}

std::string_view to_string(Verdict v) {
  switch (v) {
    case Verdict::Breached:
      return "breached";
    case Verdict::Contained:
      return "contained";
    case Verdict::Unavailable:
      return "unavailable";
    case Verdict::Inconclusive:
      return "inconclusive";
    case Verdict::Refused:
      return "refused";
  }
  return "?";
}

std::string probe_started_line(std::string_view name) {
  return fmt::format("airlock {} {}: started", kProbeVerb, name);
}

std::string_view to_string(TierStatus s) {
  switch (s) {
    case TierStatus::Ran:
      return "ran";
    case TierStatus::Unavailable:
      return "unavailable";
    case TierStatus::Skipped:
      return "skipped";
  }
  return "?";
}

Json ProbeReport::to_json() const {
  Json j = extra.is_object() ? extra : Json::object();
  j["probe"] = probe;
  j["breached"] = breached;
  j["evidence"] = evidence;
  j["errno"] = err;
  return j;
}

std::optional<ProbeReport> parse_probe_report(std::string_view output, std::string_view name) {
  size_t end = output.size();
  while (end > 0) {
    size_t start = output.rfind('\n', end - 1);
    start = start == std::string_view::npos ? 0 : start + 1;
    std::string_view line = output.substr(start, end - start);
    end = start == 0 ? 0 : start - 1;
    if (line.empty() || line.front() != '{') continue;
    // A probe's output is the sandbox's: bounded like any untrusted JSON.
    auto parsed = parse_json(line, Code::ProtocolError, "a probe report");
    if (!parsed) continue;
    Json j = std::move(*parsed);
    if (!j.is_object() || !j.contains("probe") || j["probe"] != name || !j.contains("breached") ||
        !j["breached"].is_boolean())
      continue;
    ProbeReport r;
    r.probe = std::string(name);
    r.breached = j["breached"].get<bool>();
    r.evidence = j.contains("evidence") && j["evidence"].is_string() ? j["evidence"].get<std::string>() : "";
    r.err = j.contains("errno") && j["errno"].is_number_integer() ? j["errno"].get<int>() : 0;
    for (const char* k : {"probe", "breached", "evidence", "errno"}) j.erase(k);
    r.extra = std::move(j);
    return r;
  }
  return std::nullopt;
}

Verdict TierResult::expected(Breach b) const {
  if (expect_breach) return Verdict::Breached;
  if (is_door_probe(b) && !plan::can_have_door(executor)) return Verdict::Refused;
  return Verdict::Contained;
}

size_t TierResult::matching() const {
  return static_cast<size_t>(std::count_if(results.begin(), results.end(), [&](const ScenarioResult& r) {
    // A refusal is only ever the planner's for the door policy, which differs from the suite's own
    // policy (planned for this tier, or the tier would not run) in code_network alone.
    return r.verdict == expected(r.breach);
  }));
}

bool TierResult::matched() const {
  return status == TierStatus::Ran && !cancelled && results.size() == all_breaches().size() &&
         matching() == results.size();
}

std::string TierResult::verdict() const {
  std::string name(policy::to_string(executor));
  if (status == TierStatus::Skipped)
    return fmt::format("{}: skipped — {}", name,
                       refusal ? refusal->message : std::string("not part of this build"));
  if (status == TierStatus::Unavailable)
    return fmt::format("{}: unavailable — {}: {}", name, refusal ? to_name(refusal->code) : "?",
                       refusal ? refusal->message : std::string());
  size_t total = all_breaches().size();
  bool doorless = !expect_breach && !plan::can_have_door(executor);
  size_t door_total = doorless ? door_probe_count() : 0;
  std::vector<std::string> wrong, errors, unsure, refused_wrongly;
  size_t refused = 0;
  const Error* door_refusal = nullptr;
  for (const auto& r : results) {
    if (r.verdict == Verdict::Unavailable) {
      errors.push_back(fmt::format("{} ({})", to_string(r.breach), r.error ? to_name(r.error->code) : "?"));
    } else if (r.verdict == Verdict::Inconclusive) {
      unsure.push_back(std::string(to_string(r.breach)));
    } else if (r.verdict == Verdict::Refused) {
      if (r.verdict == expected(r.breach) && r.error) {
        ++refused;
        door_refusal = &*r.error;
      } else {
        refused_wrongly.push_back(std::string(to_string(r.breach)));
      }
    } else if (r.verdict != expected(r.breach)) {
      wrong.push_back(std::string(to_string(r.breach)));
    }
  }
  std::string line;
  if (expect_breach) {
    line = fmt::format("{}: {}/{} breached", name, matching(), total);
    if (matched()) line += " — every probe detects its breach";
    if (!wrong.empty())
      line += fmt::format(
          " — NOT DETECTED: {} (with nothing confining it each probe must breach: the probe or its "
          "host check is broken)",
          fmt::join(wrong, ", "));
  } else {
    line = fmt::format("{}: {}/{} contained", name, matching() - refused, total - door_total);
    if (doorless)
      line += fmt::format("; door probes {}/{} refused{}", refused, door_total,
                          door_refusal
                              ? fmt::format(" — {}: {}", to_name(door_refusal->code), door_refusal->message)
                              : std::string());
    if (!wrong.empty()) line += fmt::format(" — BREACHED or NOT REFUSED: {}", fmt::join(wrong, ", "));
  }
  if (!refused_wrongly.empty())
    line += fmt::format(" — REFUSED where a door must run: {}", fmt::join(refused_wrongly, ", "));
  if (!errors.empty()) line += fmt::format(" — could not run: {}", fmt::join(errors, ", "));
  if (!unsure.empty())
    line += fmt::format(" — INCONCLUSIVE (the probe never started): {}", fmt::join(unsure, ", "));
  if (cancelled) line += fmt::format(" — cancelled after {} of {}", results.size(), total);
  return line;
}

bool SuiteReport::ok() const {
  if (cancelled) return false;
  bool ran = false;
  for (const auto& t : tiers) {
    if (t.status == TierStatus::Ran) {
      if (!t.matched()) return false;
      ran = true;
    } else if (t.requested) {
      return false;
    }
  }
  return ran;
}

Json SuiteReport::to_json() const {
  auto limits = [](const SuiteLimits& l) {
    return Json{{"memory_mb", l.memory_mb},
                {"cpu_seconds", l.cpu_seconds},
                {"max_processes", l.max_processes},
                {"command_timeout_seconds", l.command_timeout_seconds}};
  };
  Json names = Json::array(), door_names = Json::array();
  for (Breach b : all_breaches()) {
    names.push_back(to_string(b));
    if (is_door_probe(b)) door_names.push_back(to_string(b));
  }
  Json executors = Json::array();
  for (const auto& t : tiers) {
    std::string expected = t.expect_breach ? "breached" : "contained";
    Json results = Json::array();
    for (const auto& r : t.results) {
      Json j = r.details;
      j["breach"] = to_string(r.breach);
      j["verdict"] = to_string(r.verdict);
      j["expected"] = to_string(t.expected(r.breach));
      j["door"] = is_door_probe(r.breach);
      j["matched"] = r.verdict == t.expected(r.breach);
      j["evidence"] = r.evidence;
      j["seconds"] = r.seconds;
      results.push_back(std::move(j));
    }
    executors.push_back({{"executor", policy::to_string(t.executor)},
                         {"status", to_string(t.status)},
                         {"expected", expected},
                         {"requested", t.requested},
                         {"matched", t.matched()},
                         {"verdict", t.verdict()},
                         {"refusal", t.refusal ? t.refusal->to_json() : Json(nullptr)},
                         {"cancelled", t.cancelled},
                         {"canary_root", t.canary_root},
                         {"seconds", t.seconds},
                         {"results", results}});
  }
  return {{"schema", "airlock.escape_suite.v1"},
          {"profile", plan::to_string(profile)},
          {"uid", uid},
          {"kernel", kernel},
          {"ok", ok()},
          {"cancelled", cancelled},
          {"breaches", names},
          {"door_breaches", door_names},
          {"limits", {{"tier", limits(kTierLimits)}, {"host_baseline", limits(kHostBaselineLimits)}}},
          {"probe_amounts",
           {{"memory_mib", kProbeMemoryMib},
            {"cpu_seconds", kProbeCpuSeconds},
            {"sleep_seconds", kProbeSleepSeconds}}},
          {"executors", executors}};
}

std::string SuiteReport::to_text() const {
  std::string s = fmt::format("airlock escape-suite: profile {}, uid {}, kernel {}\n",
                              plan::to_string(profile), uid, kernel);
  std::vector<const TierResult*> columns;
  for (const auto& t : tiers)
    if (t.status != TierStatus::Skipped) columns.push_back(&t);
  if (!columns.empty()) {
    auto row = [&](std::string_view first, auto&& cell_of) {
      std::string line = fmt::format("  {:<30}", first);
      for (const auto* t : columns) line += fmt::format("{:<13}", cell_of(*t));
      while (line.back() == ' ') line.pop_back();
      s += line + "\n";
    };
    s += "\n";
    row("BREACH", [](const TierResult& t) { return std::string(policy::to_string(t.executor)); });
    for (Breach b : all_breaches()) row(to_string(b), [b](const TierResult& t) { return cell(t, b); });
    s += "\nevidence:\n";
    for (const auto* t : columns) {
      if (t->status != TierStatus::Ran) continue;
      for (const auto& r : t->results)
        s += fmt::format("  {}/{}: {}: {}\n", policy::to_string(t->executor), to_string(r.breach),
                         r.breached() ? "BREACHED" : to_string(r.verdict), r.evidence);
    }
  }
  s += "\n";
  for (const auto& t : tiers)
    s += t.status == TierStatus::Ran ? fmt::format("{} ({:.1f} s)\n", t.verdict(), t.seconds)
                                     : t.verdict() + "\n";
  return s;
}

void Suite::cancel() {
  cancelled_ = true;
  std::lock_guard lock(mu_);
  if (current_) current_->interrupt();
}

Result<TierResult> Suite::run_tier(ExecutorKind executor, bool requested, const plan::HostFacts& facts) {
  auto t0 = std::chrono::steady_clock::now();
  TierResult t;
  t.executor = executor;
  t.expect_breach = executor == ExecutorKind::Host;
  t.requested = requested;
  auto pol = TRY(suite_policy(executor));
  if (auto planned = exec::plan_session(pol, facts, {opts_.profile, "", 0}); !planned) {
    t.refusal = planned.error();
    t.status =
        !requested && only_not_in_build(planned.error()) ? TierStatus::Skipped : TierStatus::Unavailable;
    return t;
  }
  auto canaries = TRY(Canaries::plant(opts_.airlock_binary));
  canaries->set_foreign_children(foreign_children_);
  t.canary_root = canaries->bait().root;
  // The door probes' policy names the allowed server's port, known once the bait is planted. A
  // tier that cannot have a door refuses it by name: that refusal is its door probes' verdict. The
  // two policies differ in code_network alone, so a refusal here is the door's.
  auto door_pol = TRY(suite_policy(executor, &canaries->bait().door));
  std::optional<Error> door_refusal;
  if (auto planned = exec::plan_session(door_pol, facts, {opts_.profile, "", 0}); !planned)
    door_refusal = planned.error();
  TierContext ctx{pol,
                  door_refusal ? nullptr : &door_pol,
                  door_refusal,
                  facts,
                  opts_,
                  *canaries,
                  [this](broker::Session* s) {
                    std::lock_guard lock(mu_);
                    current_ = s;
                    if (s && cancelled_) s->interrupt();
                  }};
  for (Breach b : all_breaches()) {
    if (cancelled_) break;
    t.results.push_back(run_one(b, ctx));
    if (opts_.on_result) opts_.on_result(t, t.results.back());
  }
  t.cancelled = cancelled_;
  canaries.reset();  // the sleeper, the listeners, the environment variable, the directory
  t.seconds = seconds_since(t0);
  return t;
}

Result<SuiteReport> Suite::run() {
  SuiteReport rep;
  rep.profile = opts_.profile;
  rep.uid = ::geteuid();
  std::vector<ExecutorKind> order;
  if (opts_.executor) {
    order = {*opts_.executor};
  } else {
    // Every tier this build implements (exec's registry), the host only in the development profile.
    for (auto e : exec::built_tiers())
      if (e != ExecutorKind::Host || opts_.profile == plan::Profile::Development) order.push_back(e);
  }
  plan::FactNeeds needs;
  for (auto e : order) {
    auto pol = TRY(suite_policy(e));
    auto n = plan::fact_needs(pol, exec::built_tiers());
    needs.user_namespaces |= n.user_namespaces;
    needs.overlayfs |= n.overlayfs;
    needs.cgroups |= n.cgroups;
    needs.kvm |= n.kvm;
  }
  // `airlock vm verify` hands over the guest it is verifying: only the rest is measured.
  bool pinned_vm = needs.kvm && opts_.microvm;
  if (pinned_vm) needs.kvm = false;
  plan::HostFacts facts = exec::HostProbe(opts_.state_dir).facts(needs);
  if (pinned_vm) facts.microvm = *opts_.microvm;
  rep.kernel = facts.kernel_release;

  // A child subreaper for the run: what a probe leaves behind after its supervisor is gone comes
  // to us rather than to init, so it can be found, killed and reaped.
  int was_subreaper = 0;
  (void)::prctl(PR_GET_CHILD_SUBREAPER, &was_subreaper);
  if (!was_subreaper && ::prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
    return fail_errno(Code::ConfigError, "prctl(PR_SET_CHILD_SUBREAPER)", errno);
  foreign_children_ = children_of_self();
  Result<SuiteReport> result = rep;
  for (auto e : order) {
    if (cancelled_) break;
    auto t = run_tier(e, opts_.executor.has_value(), facts);
    if (!t) {
      result = std::unexpected(t.error());
      break;
    }
    result->tiers.push_back(std::move(*t));
  }
  if (!was_subreaper) (void)::prctl(PR_SET_CHILD_SUBREAPER, 0);
  if (result) result->cancelled = cancelled_;
  return result;
}

}  // namespace airlock::escape
