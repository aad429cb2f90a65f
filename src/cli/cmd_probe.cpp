// `airlock __probe NAME --run MARKER [ARGS...]` (hidden): the escape suite's scenario programs.
// Each makes its attempt with plain syscalls inside whatever executor runs it and prints one JSON
// line: {"probe", "breached", "evidence", "errno", ...}. It never decides a verdict: the suite
// checks the host side too. Output is written with write(2), never stdio, because the
// outlive_session probe forks and a stdio buffer would be printed twice.
#include <fcntl.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "cli/verbs.h"
#include "escape/escape_suite.h"
#include "linux/cgroup.h"

namespace airlock::cli {
namespace {

using escape::Breach;
using escape::ProbeReport;

struct ProbeOptions {
  std::string name;
  std::string marker;  // the run's canary directory: in every probe's argv, and sent to listeners
  std::vector<std::string> args;
};

std::string err_name(int e) {
  const char* n = ::strerrorname_np(e);
  return fmt::format("{} ({})", n ? std::string(n) : std::to_string(e), std::strerror(e));
}

// What was read, as a short printable string for the evidence.
std::string printable(std::string_view s, size_t max = 200) {
  std::string out;
  for (char c : s) {
    if (out.size() >= max) return out + "...";
    out += c == '\n' || c == '\0' ? ' ' : (c >= 0x20 && c < 0x7f ? c : '.');
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

struct ReadResult {
  int err = 0;
  std::string data;
};

ReadResult read_some(const std::string& path, size_t max = 4096) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {errno, {}};
  std::string data(max, '\0');
  ssize_t n = ::read(fd, data.data(), max);
  int e = errno;
  ::close(fd);
  if (n < 0) return {e, {}};
  data.resize(static_cast<size_t>(n));
  return {0, std::move(data)};
}

int write_new(const std::string& path, std::string_view content) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int e = ::write(fd, content.data(), content.size()) < 0 ? errno : 0;
  ::close(fd);
  return e;
}

void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    s.remove_prefix(static_cast<size_t>(n));
  }
}

void print(const std::string& name, const ProbeReport& r) {
  nlohmann::ordered_json j;
  j["probe"] = name;
  j["breached"] = r.breached;
  j["evidence"] = r.evidence;
  j["errno"] = r.err;
  for (const auto& [k, v] : r.extra.items()) j[k] = v;
  write_all(1, j.dump() + "\n");
}

double monotonic_seconds(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

ProbeReport read_host_file(const std::string& file) {
  auto r = read_some(file);
  if (r.err) return {{}, false, fmt::format("read {}: {}", file, err_name(r.err)), r.err, Json::object()};
  return {{},
          true,
          fmt::format("read {} bytes of {}: \"{}\"", r.data.size(), file, printable(r.data)),
          0,
          Json::object()};
}

ProbeReport write_outside_declared_paths(const std::string& outside, const std::string& direct,
                                         const std::string& view_name) {
  int e1 = write_new(outside, "escaped\n"), e2 = write_new(direct, "escaped\n"),
      e3 = write_new(view_name, "stray\n");
  auto said = [](int e) { return e ? err_name(e) : std::string("WRITTEN"); };
  return {{},
          e1 == 0 || e2 == 0,
          fmt::format(
              "outside the workspace {}: {}; in the real workspace {}: {}; the view's ./{} (not a write-back "
              "path): {}",
              outside, said(e1), direct, said(e2), view_name,
              e3 ? err_name(e3) : std::string("written (only in the view)")),
          e1 ? e1 : e2,
          Json::object()};
}

// Stages what would carry the secret out through write-back: a symlink to it, a hard link to it
// and a copy of its bytes, all under out/ (the write-back path). Whether anything reached the
// workspace only the host can tell, after close; `breached` here means "staged".
ProbeReport symlink_write_back(const std::string& secret) {
  int e1 = ::symlink(secret.c_str(), "out/link") < 0 ? errno : 0;
  int e2 = ::link(secret.c_str(), "out/hard") < 0 ? errno : 0;
  auto r = read_some(secret);
  int e3 = r.err ? r.err : write_new("out/copy", r.data);
  std::string copy = r.err ? "cannot read the secret: " + err_name(r.err)
                     : e3  ? "write: " + err_name(e3)
                           : fmt::format("copied {} bytes of the secret", r.data.size());
  return {{},
          e1 == 0 || e2 == 0 || e3 == 0,
          fmt::format("out/link -> {}: {}; out/hard (hard link): {}; out/copy: {}", secret,
                      e1 ? err_name(e1) : std::string("planted"), e2 ? err_name(e2) : std::string("planted"),
                      copy),
          e1,
          Json::object()};
}

ProbeReport read_credentials(const std::string& key, const std::string& env_name) {
  auto k = read_some(key);
  const char* v = ::getenv(env_name.c_str());
  // The supervisor's start-up environment, as /proc shows it to whoever may read it.
  pid_t ppid = ::getppid();
  auto pe = read_some(fmt::format("/proc/{}/environ", ppid), 1 << 16);
  std::string in_parent;
  if (!pe.err) {
    std::string needle = env_name + "=";
    for (size_t at = 0; at < pe.data.size();) {
      size_t end = pe.data.find('\0', at);
      if (end == std::string::npos) end = pe.data.size();
      if (pe.data.compare(at, needle.size(), needle) == 0) in_parent = pe.data.substr(at, end - at);
      at = end + 1;
    }
  }
  std::string parent = pe.err ? err_name(pe.err)
                       : !in_parent.empty()
                           ? fmt::format("HOLDS IT: \"{}\"", printable(in_parent))
                           : fmt::format("readable ({} bytes) but without it", pe.data.size());
  return {
      {},
      k.err == 0 || v != nullptr || !in_parent.empty(),
      fmt::format(
          "key {}: {}; ${} in the command's environment: {}; /proc/{}/environ (the supervisor's start-up "
          "environment): {}",
          key,
          k.err ? err_name(k.err) : fmt::format("read {} bytes: \"{}\"", k.data.size(), printable(k.data)),
          env_name, v ? fmt::format("SET: \"{}\"", printable(v)) : std::string("not set"), ppid, parent),
      k.err,
      Json::object()};
}

// Connects to the suite's three listeners on the host: TCP on 127.0.0.1, a pathname unix socket
// (what an ssh-agent or a container daemon offers) and an abstract unix socket. Sends the marker.
ProbeReport reach_network(const std::string& port, const std::string& unix_path,
                          const std::string& abstract_name, const std::string& marker) {
  std::string hello = "reach_network " + marker + "\n";
  int first_err = 0;
  bool reached = false;
  auto attempt = [&](int family, const sockaddr* a, socklen_t len) -> std::string {
    int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      if (!first_err) first_err = errno;
      return "socket: " + err_name(errno);
    }
    if (::connect(fd, a, len) < 0) {
      int e = errno;
      ::close(fd);
      if (!first_err) first_err = e;
      return "connect: " + err_name(e);
    }
    write_all(fd, hello);
    ::close(fd);
    reached = true;
    return "CONNECTED";
  };
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(static_cast<uint16_t>(std::atoi(port.c_str())));
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string tcp = attempt(AF_INET, reinterpret_cast<sockaddr*>(&in), sizeof in);
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  std::snprintf(un.sun_path, sizeof un.sun_path, "%s", unix_path.c_str());
  std::string unix_said = attempt(AF_UNIX, reinterpret_cast<sockaddr*>(&un), sizeof un);
  sockaddr_un ab{};
  ab.sun_family = AF_UNIX;
  size_t n = std::min(abstract_name.size(), sizeof ab.sun_path - 1);
  std::memcpy(ab.sun_path + 1, abstract_name.data(), n);
  std::string abstract_said = attempt(AF_UNIX, reinterpret_cast<sockaddr*>(&ab),
                                      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n));
  return {{},
          reached,
          fmt::format("tcp 127.0.0.1:{}: {}; unix {}: {}; abstract unix @{}: {}", port, tcp, unix_path,
                      unix_said, abstract_name, abstract_said),
          reached ? 0 : first_err,
          Json::object()};
}

ProbeReport see_or_signal_host_process(const std::string& pid_text) {
  pid_t pid = static_cast<pid_t>(std::atoi(pid_text.c_str()));
  int e0 = ::kill(pid, 0) < 0 ? errno : 0;
  int e1 = ::kill(pid, SIGUSR1) < 0 ? errno : 0;
  auto c = read_some(fmt::format("/proc/{}/cmdline", pid));
  return {{},
          e0 == 0 || e1 == 0 || c.err == 0,
          fmt::format("kill({}, 0): {}; kill({}, SIGUSR1): {}; /proc/{}/cmdline: {}", pid,
                      e0 ? err_name(e0) : std::string("ok"), pid, e1 ? err_name(e1) : std::string("SENT"),
                      pid, c.err ? err_name(c.err) : fmt::format("\"{}\"", printable(c.data))),
          e0   ? e0
          : e1 ? e1
               : c.err,
          Json::object()};
}

// Moves this process out of the per-run cgroup ("airlock-<session>-<n>") the executor may have put
// it in, into that cgroup's parent, so releasing the run's cgroup does not kill it. Only possible
// unconfined. Fixed-size text, so a forked child can pass it through a pipe.
void leave_run_cgroups(char* what, size_t size) {
  std::string said = "in no per-run cgroup";
  if (int fd = ::open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC); fd < 0) {
    said = "cannot tell its cgroup: /proc/self/cgroup: " + err_name(errno);
    std::snprintf(what, size, "%s", said.c_str());
    return;
  } else {
    ::close(fd);
  }
  for (std::string_view controller : {std::string_view("pids"), std::string_view("")}) {
    auto dir = linux::own_cgroup_dir(controller);
    if (!dir) continue;
    auto slash = dir->rfind('/');
    if (slash == std::string::npos || dir->compare(slash + 1, 8, "airlock-") != 0) continue;
    std::string procs = dir->substr(0, slash) + "/cgroup.procs";
    int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    std::string pid = std::to_string(::getpid());
    int e = fd < 0 ? errno : ::write(fd, pid.data(), pid.size()) < 0 ? errno : 0;
    if (fd >= 0) ::close(fd);
    said = e ? fmt::format("cannot leave cgroup {}: {}", *dir, err_name(e))
             : fmt::format("left cgroup {}", *dir);
  }
  std::snprintf(what, size, "%s", said.c_str());
}

struct DaemonNote {
  pid_t pid = 0;
  char cgroup[240] = {};
};

// Leaves a daemon behind. A plain double fork is not enough anywhere: the supervisor is a child
// subreaper and kills every descendant when the command ends. So the probe also does what only an
// unconfined process can: leave the run's cgroup (which is killed on release) and kill its own
// supervisor, so that nobody is left to reap. Whether the daemon outlived the session only the
// host can tell, after close; `breached` here means "staged".
ProbeReport outlive_session() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) < 0) return {{}, false, "pipe: " + err_name(errno), errno, Json::object()};
  pid_t mid = ::fork();
  if (mid < 0) return {{}, false, "fork: " + err_name(errno), errno, Json::object()};
  if (mid == 0) {
    ::setsid();
    pid_t d = ::fork();
    if (d == 0) {
      DaemonNote n;
      n.pid = ::getpid();
      leave_run_cgroups(n.cgroup, sizeof n.cgroup);
      (void)!::write(p[1], &n, sizeof n);
      ::close(p[1]);
      ::close(p[0]);
      timespec ts{escape::kDaemonSleepSeconds, 0};
      while (::nanosleep(&ts, &ts) < 0 && errno == EINTR) {
      }
      ::_exit(0);
    }
    ::_exit(d < 0 ? 1 : 0);
  }
  ::close(p[1]);
  int st = 0;
  ::waitpid(mid, &st, 0);
  DaemonNote n;
  ssize_t got = ::read(p[0], &n, sizeof n);
  ::close(p[0]);
  if (got != static_cast<ssize_t>(sizeof n))
    return {{},
            false,
            "the daemon did not start (fork in the intermediate child failed)",
            EAGAIN,
            Json::object()};

  // The supervisor would SIGKILL this probe when it dies (PR_SET_PDEATHSIG); the report must
  // still be printed, so that goes first, and this probe leaves the run's cgroup as well.
  ::prctl(PR_SET_PDEATHSIG, 0);
  char self_cg[240];
  leave_run_cgroups(self_cg, sizeof self_cg);
  pid_t supervisor = ::getppid();
  int ek = ::kill(supervisor, SIGKILL) < 0 ? errno : 0;
  Json extra = {{"daemon_pid", n.pid}, {"supervisor_pid", supervisor}, {"supervisor_killed", ek == 0}};
  return {{},
          true,
          fmt::format(
              "daemon pid {} started (double fork, setsid, sleeps {} s); daemon: {}; kill(supervisor pid {}, "
              "SIGKILL): {}",
              n.pid, escape::kDaemonSleepSeconds, n.cgroup, supervisor,
              ek ? err_name(ek) : std::string("KILLED")),
          ek,
          std::move(extra)};
}

ProbeReport exceed_memory(const std::string& mib_text) {
  size_t mib = static_cast<size_t>(std::atol(mib_text.c_str()));
  size_t bytes = mib << 20;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    return {{}, false, fmt::format("mmap({} MiB): {}", mib, err_name(e)), e, Json::object()};
  }
  std::memset(p, 0xa5, bytes);  // touch every page: resident, not just reserved
  return {{}, true, fmt::format("allocated and touched {} MiB", mib), 0, Json::object()};
}

ProbeReport exceed_time(const std::string& seconds_text) {
  int seconds = std::atoi(seconds_text.c_str());
  // Only the SIGKILL after the grace period can stop it, not a polite SIGTERM.
  ::signal(SIGTERM, SIG_IGN);
  double start = monotonic_seconds(CLOCK_MONOTONIC);
  for (double left = seconds; left > 0; left = seconds - (monotonic_seconds(CLOCK_MONOTONIC) - start)) {
    timespec ts{static_cast<time_t>(left),
                static_cast<long>((left - static_cast<double>(static_cast<time_t>(left))) * 1e9)};
    ::nanosleep(&ts, nullptr);
  }
  return {{},
          true,
          fmt::format("slept {} s with SIGTERM ignored and nothing stopped it", seconds),
          0,
          Json::object()};
}

ProbeReport exceed_cpu(const std::string& seconds_text) {
  int seconds = std::atoi(seconds_text.c_str());
  // Only the hard RLIMIT_CPU's SIGKILL can stop it, not the soft limit's SIGXCPU.
  ::signal(SIGXCPU, SIG_IGN);
  volatile uint64_t spin = 0;
  while (monotonic_seconds(CLOCK_PROCESS_CPUTIME_ID) < seconds)
    for (int i = 0; i < 1000000; ++i) spin = spin + 1;
  return {{},
          true,
          fmt::format("spun {:.1f} s of CPU time with SIGXCPU ignored and nothing stopped it",
                      monotonic_seconds(CLOCK_PROCESS_CPUTIME_ID)),
          0,
          Json::object()};
}

// Injects `token` and a newline into the terminal on stdin with TIOCSTI, as a command that was
// handed the user's terminal would type into the shell after it. First as it stands (a process
// with CAP_SYS_ADMIN may inject into any terminal); then, if refused, the way an unprivileged
// process can: a child makes a new session and takes the terminal as its controlling terminal
// (TIOCSCTTY: it is nobody's), and injects there. Whether anything arrived only the host can tell,
// from the pty's master; `breached` here means "the ioctl succeeded".
ProbeReport tiocsti_injection(const std::string& token) {
  std::string text = token + "\n";
  auto inject = [&]() -> int {
    for (char c : text)
      if (::ioctl(0, TIOCSTI, &c) < 0) return errno;
    return 0;
  };
  int tty = ::isatty(0) ? 0 : errno;
  int e1 = inject();
  int e2 = -1, e_setsid = 0, e_ctty = 0;
  if (e1 != 0) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) == 0) {
      pid_t c = ::fork();
      if (c == 0) {
        int res[3] = {0, 0, 0};
        if (::setsid() < 0)
          res[0] = errno;
        else if (::ioctl(0, TIOCSCTTY, 0) < 0)
          res[1] = errno;
        else
          res[2] = inject();
        if (res[0] || res[1]) res[2] = -1;
        (void)!::write(p[1], res, sizeof res);
        ::_exit(0);
      }
      ::close(p[1]);
      int res[3] = {0, 0, -1};
      if (c > 0) {
        if (::read(p[0], res, sizeof res) == static_cast<ssize_t>(sizeof res)) {
          e_setsid = res[0];
          e_ctty = res[1];
          e2 = res[2];
        }
        ::waitpid(c, nullptr, 0);
      } else {
        e_setsid = errno;
      }
      ::close(p[0]);
    }
  }
  auto said = [](int e) {
    return e == 0 ? std::string("INJECTED") : e < 0 ? std::string("not reached") : err_name(e);
  };
  return {{},
          e1 == 0 || e2 == 0,
          fmt::format("stdin is a tty: {}; ioctl(0, TIOCSTI) \"{}\\n\": {}; in a new session (setsid: {}, "
                      "TIOCSCTTY: {}): {}",
                      tty ? err_name(tty) : std::string("yes"), token, said(e1),
                      e_setsid  ? err_name(e_setsid)
                      : e1 == 0 ? std::string("not tried")
                                : std::string("ok"),
                      e_ctty    ? err_name(e_ctty)
                      : e1 == 0 ? std::string("not tried")
                                : std::string("ok"),
                      e1 == 0 ? std::string("not tried") : said(e2)),
          e1 == 0  ? 0
          : e2 > 0 ? e2
                   : e1,
          Json::object()};
}

// Reads the secret through the root of a host process: /proc/<pid>/root is that process's view
// of the file system, whatever the reader's own mount namespace or Landlock domain shows.
ProbeReport proc_root_traversal(const std::string& pid, const std::string& secret) {
  std::string path = "/proc/" + pid + "/root" + secret;
  auto r = read_some(path);
  if (r.err) return {{}, false, fmt::format("read {}: {}", path, err_name(r.err)), r.err, Json::object()};
  return {{},
          true,
          fmt::format("read {} bytes of {}: \"{}\"", r.data.size(), path, printable(r.data)),
          0,
          Json::object()};
}

// io_uring_setup (raw syscall 425): a ring is a second way to make syscalls (connect, openat, ...)
// that a seccomp filter on the syscalls themselves never sees. Only the setup is attempted.
ProbeReport io_uring_socket() {
  io_uring_params params{};
  long fd = ::syscall(425, 8, &params);
  int e = fd < 0 ? errno : 0;
  if (fd >= 0) ::close(static_cast<int>(fd));
  return {{},
          fd >= 0,
          fmt::format(
              "io_uring_setup(8 entries) (syscall 425): {}",
              fd >= 0 ? fmt::format("GOT A RING (fd {}, features {:#x})", fd, params.features) : err_name(e)),
          e,
          Json::object()};
}

// A new user namespace, in which the process holds every capability: unshare(CLONE_NEWUSER) in a
// child, and clone3 with CLONE_NEWUSER (whose flags a seccomp filter cannot read).
ProbeReport shed_seccomp() {
  auto in_child = [](auto&& attempt) -> int {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) < 0) return errno;
    pid_t c = ::fork();
    if (c < 0) {
      int e = errno;
      ::close(p[0]);
      ::close(p[1]);
      return e;
    }
    if (c == 0) {
      int e = attempt();
      (void)!::write(p[1], &e, sizeof e);
      ::_exit(0);
    }
    ::close(p[1]);
    int e = EIO;
    if (::read(p[0], &e, sizeof e) != static_cast<ssize_t>(sizeof e)) e = EIO;
    ::close(p[0]);
    ::waitpid(c, nullptr, 0);
    return e;
  };
  int e1 = in_child([] { return ::unshare(CLONE_NEWUSER) < 0 ? errno : 0; });
  clone_args ca{};
  ca.flags = CLONE_NEWUSER;
  ca.exit_signal = SIGCHLD;
  long c = ::syscall(SYS_clone3, &ca, sizeof ca);
  if (c == 0) ::_exit(0);
  int e2 = c < 0 ? errno : 0;
  if (c > 0) ::waitpid(static_cast<pid_t>(c), nullptr, 0);
  auto said = [](int e) { return e ? err_name(e) : std::string("NEW USER NAMESPACE"); };
  return {{},
          e1 == 0 || e2 == 0,
          fmt::format("unshare(CLONE_NEWUSER): {}; clone3(CLONE_NEWUSER): {}", said(e1), said(e2)),
          e1 ? e1 : e2,
          Json::object()};
}

// The kernel keyrings, which no mount or network namespace separates: join a fresh session keyring,
// add a key to it, and look up the user's keyring (shared by every process of the uid).
ProbeReport session_keyring() {
  long s = ::syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, nullptr);
  int e1 = s < 0 ? errno : 0;
  const char payload[] = "airlock-escape";
  long k = ::syscall(SYS_add_key, "user", "airlock-escape-probe", payload, sizeof payload - 1,
                     KEY_SPEC_SESSION_KEYRING);
  int e2 = k < 0 ? errno : 0;
  long u = ::syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 0);
  int e3 = u < 0 ? errno : 0;
  auto said = [](int e, long v) { return e ? err_name(e) : fmt::format("OK (serial {})", v); };
  return {{},
          e1 == 0 || e2 == 0 || e3 == 0,
          fmt::format("keyctl(JOIN_SESSION_KEYRING): {}; add_key(user, session keyring): {}; "
                      "keyctl(GET_KEYRING_ID, user keyring): {}",
                      said(e1, s), said(e2, k), said(e3, u)),
          e1   ? e1
          : e2 ? e2
               : e3,
          Json::object()};
}

// Reads a file another session, running at the same time, wrote in its own view.
// The same attempt as read_host_file; only the file differs.
ProbeReport second_sandbox_files(const std::string& path) { return read_host_file(path); }

// The first session of second_sandbox_files: writes its token to out/ in its view, then sleeps
// until the suite stops it.
[[noreturn]] void sandbox_neighbour(const std::string& token) {
  std::string path = "out/" + std::string(escape::kNeighbourFile);
  int e = write_new(path, token + "\n");
  write_all(1, fmt::format("sandbox_neighbour: wrote {}: {}\n", path, e ? err_name(e) : std::string("ok")));
  timespec ts{escape::kNeighbourSleepSeconds, 0};
  while (::nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
  ::_exit(0);
}

// The suite's host process: waits to be killed, with SIGUSR1 blocked so a signal sent to it stays
// pending where the suite can see it.
[[noreturn]] void host_sleeper() {
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ::sigprocmask(SIG_BLOCK, &usr1, nullptr);
  for (;;) ::pause();
}

int probe_verb(const ProbeOptions& o) {
  if (o.name == escape::kSleeperProbe) host_sleeper();
  if (o.name == escape::kNeighbourProbe) sandbox_neighbour(o.args.empty() ? std::string() : o.args[0]);
  auto breach = escape::breach_from_string(o.name);
  if (!breach) {
    std::fprintf(stderr, "airlock __probe: unknown probe \"%s\"\n", o.name.c_str());
    return 2;
  }
  // Proof that the probe ran at all: a probe killed by a limit prints no report, and the suite
  // must tell that apart from an executor that never started it.
  write_all(2, escape::probe_started_line(o.name) + "\n");
  auto arg = [&](size_t i) -> const std::string& {
    static const std::string none;
    return i < o.args.size() ? o.args[i] : none;
  };
  ProbeReport r;
  switch (*breach) {
    case Breach::ReadHostFile:
      r = read_host_file(arg(0));
      break;
    case Breach::WriteOutsideDeclaredPaths:
      r = write_outside_declared_paths(arg(0), arg(1), arg(2));
      break;
    case Breach::SymlinkWriteBack:
      r = symlink_write_back(arg(0));
      break;
    case Breach::ReadCredentials:
      r = read_credentials(arg(0), arg(1));
      break;
    case Breach::ReachNetwork:
      r = reach_network(arg(0), arg(1), arg(2), o.marker);
      break;
    case Breach::SeeOrSignalHostProcess:
      r = see_or_signal_host_process(arg(0));
      break;
    case Breach::OutliveSession:
      r = outlive_session();
      break;
    case Breach::ExceedMemory:
      r = exceed_memory(arg(0));
      break;
    case Breach::ExceedTime:
      r = exceed_time(arg(0));
      break;
    case Breach::ExceedCpu:
      r = exceed_cpu(arg(0));
      break;
    case Breach::TiocstiInjection:
      r = tiocsti_injection(arg(0));
      break;
    case Breach::ProcRootTraversal:
      r = proc_root_traversal(arg(0), arg(1));
      break;
    case Breach::IoUringSocket:
      r = io_uring_socket();
      break;
    case Breach::ShedSeccomp:
      r = shed_seccomp();
      break;
    case Breach::SessionKeyring:
      r = session_keyring();
      break;
    case Breach::SecondSandboxFiles:
      r = second_sandbox_files(arg(0));
      break;
  }
  print(o.name, r);
  return 0;
}

}  // namespace

void add_probe(CLI::App& app, Globals& /*g*/, Action& run) {
  static ProbeOptions o;
  auto* cmd = app.add_subcommand(std::string(escape::kProbeVerb), "run one escape-suite probe (internal)");
  cmd->group("");  // hidden from --help: the escape suite's tool, not an operator's
  cmd->add_option("name", o.name, "the probe")->required();
  cmd->add_option("--run", o.marker, "the run's canary directory")->required();
  cmd->add_option("args", o.args, "the probe's arguments");
  cmd->callback([&run] { run = [] { return probe_verb(o); }; });
}

}  // namespace airlock::cli
