#include "cli/ssh_transport.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>

#include "base/child_process.h"
#include "base/encoding.h"
#include "base/unique_fd.h"

extern char** environ;

namespace airlock::cli {
namespace {

constexpr size_t kErrTail = 4096;

Result<std::string> transport_string(const Json& t, const char* key, std::string_view machine) {
  auto it = t.find(key);
  if (it == t.end()) return std::string();
  if (!it->is_string())
    return fail(Code::ConfigError, fmt::format("machine {}: its transport's {} is not a string", machine, key),
                {{"machine", machine}});
  return it->get<std::string>();
}

}  // namespace

Result<SshTarget> ssh_target(const Json& transport, std::string_view machine) {
  if (!transport.is_object() || !transport.contains("ssh"))
    return fail(Code::ConfigError,
                fmt::format("machine {} has no ssh transport (`airlock machine add {} --ssh user@host[:port]` records one)",
                            machine, machine),
                {{"machine", machine}});
  SshTarget t;
  std::string spec = TRY(transport_string(transport, "ssh", machine));
  // Written by machine add as user@host:port or user@[v6]:port.
  size_t at = spec.find('@'), colon = spec.rfind(':');
  if (at == std::string::npos || colon == std::string::npos || colon < at)
    return fail(Code::ConfigError, fmt::format("machine {}: transport ssh \"{}\" is not user@host:port", machine, spec),
                {{"machine", machine}});
  t.user = spec.substr(0, at);
  t.host = spec.substr(at + 1, colon - at - 1);
  if (t.host.size() > 2 && t.host.front() == '[' && t.host.back() == ']') t.host = t.host.substr(1, t.host.size() - 2);
  std::string_view port = std::string_view(spec).substr(colon + 1);
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), t.port);
  if (ec != std::errc() || end != port.data() + port.size() || t.port < 1 || t.port > 65535 || t.user.empty() ||
      t.host.empty() || t.user.front() == '-' || t.host.front() == '-')
    return fail(Code::ConfigError, fmt::format("machine {}: transport ssh \"{}\" is not user@host:port", machine, spec),
                {{"machine", machine}});
  t.identity = TRY(transport_string(transport, "identity", machine));
  t.known_hosts = TRY(transport_string(transport, "known_hosts", machine));
  t.dir = TRY(transport_string(transport, "dir", machine));
  if (t.dir.empty()) t.dir = ".airlock";
  return t;
}

std::string shell_quote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

Result<std::vector<std::string>> ssh_command(const SshTarget& t, const std::string& script) {
  std::vector<std::string> args = {"ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o",
                                   "ConnectTimeout=15", "-o", "ServerAliveInterval=15", "-p", std::to_string(t.port)};
  if (!t.identity.empty()) args.insert(args.end(), {"-i", t.identity, "-o", "IdentitiesOnly=yes"});
  // The row's host keys, and no others: not the system-wide file either.
  if (!t.known_hosts.empty())
    args.insert(args.end(), {"-o", "UserKnownHostsFile=" + t.known_hosts, "-o", "GlobalKnownHostsFile=/dev/null"});
  // The far login shell reads the command line once, whatever shell it is (sh, bash, zsh, fish,
  // csh quote differently): it sees only base64 inside single quotes, which every one of them takes
  // as is, and /bin/sh decodes and runs the script. No byte of ours is parsed by the login shell.
  std::string encoded = base64_encode(script);
  if (encoded.size() > kMaxRemoteScript)
    return fail(Code::OptionInvalid,
                fmt::format("the command for {}@{} is {} bytes once encoded, more than one ssh command carries ({}): "
                            "shorten the command line or the policy",
                            t.user, t.host, encoded.size(), kMaxRemoteScript),
                {{"host", t.host}, {"bytes", encoded.size()}});
  args.insert(args.end(), {"--", t.user + "@" + t.host,
                           "exec /bin/sh -c 'eval \"$(echo " + encoded + " | base64 -d)\"'"});
  return args;
}

Result<RemoteRun> ssh_run(const SshTarget& t, const std::string& script, int stdin_fd, std::chrono::seconds timeout,
                          size_t max_out) {
  auto args = TRY(ssh_command(t, script));
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int o[2], e[2];
  if (::pipe2(o, O_CLOEXEC) < 0) return fail_errno(Code::IoError, "pipe2 for ssh", errno);
  UniqueFd out_rd(o[0]), out_wr(o[1]);
  if (::pipe2(e, O_CLOEXEC) < 0) return fail_errno(Code::IoError, "pipe2 for ssh", errno);
  UniqueFd err_rd(e[0]), err_wr(e[1]);
  UniqueFd null_in;
  if (stdin_fd < 0) {
    null_in.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    stdin_fd = null_in.get();
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, stdin_fd, 0);
  posix_spawn_file_actions_adddup2(&fa, out_wr.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, err_wr.get(), 2);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, "ssh", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  out_wr.reset();
  err_wr.reset();
  if (rc != 0)
    return fail_errno(Code::ConfigError, "cannot start ssh (Debian's openssh-client)", rc);
  auto pidfd = open_pidfd(pid);
  if (!pidfd) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return std::unexpected(pidfd.error());
  }
  ChildProcess child(pid, std::move(*pidfd));  // killed and reaped on every way out

  RemoteRun r;
  bool too_much = false;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (out_rd || err_rd) {
    pollfd p[2] = {{out_rd ? out_rd.get() : -1, POLLIN, 0}, {err_rd ? err_rd.get() : -1, POLLIN, 0}};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return fail(Code::ServerUnreachable,
                  fmt::format("ssh to {}@{}:{} did not finish within {} s", t.user, t.host, t.port, timeout.count()),
                  {{"host", t.host}, {"port", t.port}, {"stderr", escape_for_terminal(r.err)}});
    int n = ::poll(p, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno(Code::IoError, "poll ssh", errno);
    for (int i = 0; i < 2; ++i) {
      if (!p[i].revents) continue;
      UniqueFd& fd = i == 0 ? out_rd : err_rd;
      char buf[65536];
      ssize_t got = ::read(fd.get(), buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        fd.reset();
        continue;
      }
      if (i == 0) {
        if (r.out.size() + static_cast<size_t>(got) > max_out) {
          too_much = true;
          out_rd.reset();
          err_rd.reset();
          break;
        }
        r.out.append(buf, static_cast<size_t>(got));
      } else {
        r.err.append(buf, static_cast<size_t>(got));
        if (r.err.size() > kErrTail) r.err.erase(0, r.err.size() - kErrTail);
      }
    }
  }
  if (too_much)
    return fail(Code::ProtocolError,
                fmt::format("{}@{}:{} answered more than {} bytes", t.user, t.host, t.port, max_out),
                {{"host", t.host}, {"port", t.port}});
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  auto st = TRY(child.wait_for(std::max(left, std::chrono::milliseconds(1))));
  if (!st)
    return fail(Code::ServerUnreachable,
                fmt::format("ssh to {}@{}:{} did not finish within {} s", t.user, t.host, t.port, timeout.count()),
                {{"host", t.host}, {"port", t.port}});
  r.status = st->shell_status();
  return r;
}

Error unreachable_error(const SshTarget& t, std::string_view machine, const RemoteRun& r) {
  std::string said = r.err;
  while (!said.empty() && (said.back() == '\n' || said.back() == '\r')) said.pop_back();
  if (size_t nl = said.rfind('\n'); nl != std::string::npos) said = said.substr(nl + 1);
  return Error{Code::ServerUnreachable,
               fmt::format("machine {}: ssh {}@{} -p {} failed: {}", machine, t.user, t.host, t.port,
                           escape_for_terminal(said.empty() ? "no reason given" : said)),
               {{"machine", machine}, {"host", t.host}, {"port", t.port}, {"ssh_stderr", escape_for_terminal(r.err)}}};
}

}  // namespace airlock::cli
