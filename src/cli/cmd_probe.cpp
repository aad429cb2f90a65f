// `airlock __probe NAME --run MARKER [ARGS...]` (hidden): the escape suite's scenario programs.
// Each makes its attempt with plain syscalls inside whatever executor runs it and prints one JSON
// line: {"probe", "breached", "evidence", "errno", ...}. It never decides a verdict: the suite
// checks the host side too. Output is written with write(2), never stdio, because the
// outlive_session probe forks and a stdio buffer would be printed twice.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/ranges.h>
#include <linux/io_uring.h>
#include <linux/capability.h>
#include <linux/keyctl.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sched.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/resource.h>
#include <sys/shm.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <optional>

#include "cli/verbs.h"
#include "escape/dns_wire.h"
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

// Plants the marker at each target of `b`, in the view (relative) and straight in the workspace
// `ws` (where it lands on a host without a view around it): appended to what is there, missing
// directories made, executable (a hook must be).
ProbeReport plant(Breach b, const std::string& ws) {
  std::vector<std::string> done, failed;
  for (const auto& rel : escape::plant_targets(b)) {
    std::string line = rel.ends_with("/config") ? fmt::format("\n[core]\n\tfsmonitor = echo {}\n", escape::kPlantMarker)
                                                : fmt::format("\n: {}\n", escape::kPlantMarker);
    for (const std::string& path : {rel, ws + "/" + rel}) {
      std::error_code ec;
      std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0755);
      int e = fd < 0 ? errno : 0;
      if (fd >= 0) {
        if (::write(fd, line.data(), line.size()) < 0) e = errno;
        ::close(fd);
      }
      (e ? failed : done).push_back(e ? path + ": " + err_name(e) : path);
    }
  }
  return {{},
          !done.empty(),
          fmt::format("written [{}]; refused [{}]", fmt::join(done, ", "), fmt::join(failed, ", ")),
          0,
          Json::object()};
}

// Reads the workspace's second name of the secret, from the view and straight from the workspace.
ProbeReport read_through_hard_link(const std::string& ws) {
  std::vector<std::string> said;
  bool read = false;
  for (const std::string& path : {std::string("out/linked"), ws + "/out/linked"}) {
    auto r = read_some(path);
    read = read || !r.err;
    said.push_back(r.err ? fmt::format("{}: {}", path, err_name(r.err))
                         : fmt::format("{}: \"{}\"", path, printable(r.data)));
  }
  return {{}, read, fmt::format("{}", fmt::join(said, "; ")), 0, Json::object()};
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

// The capabilities this process holds, and the bounding set an exec could draw on without
// no_new_privs; then a pause, so the suite sees the same from the host (/proc/<pid>/status), which
// is the judge. Nothing is used: changing the host (sethostname, the clock) is not the suite's to do.
ProbeReport hold_capabilities() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  int e = ::syscall(SYS_capget, &hdr, data) < 0 ? errno : 0;
  uint64_t eff = (uint64_t{data[1].effective} << 32) | data[0].effective;
  uint64_t prm = (uint64_t{data[1].permitted} << 32) | data[0].permitted;
  uint64_t bnd = 0;
  for (int cap = 0; cap < 64; ++cap)
    if (::prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1) bnd |= uint64_t{1} << cap;
  int nnp = ::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
  bool holds = e == 0 && (eff != 0 || prm != 0 || (bnd != 0 && nnp != 1));
  timespec ts{2, 0};
  while (::nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
  return {{},
          holds,
          fmt::format("capget: {}; effective {:#x}, permitted {:#x}, bounding {:#x}, no_new_privs {}",
                      e ? err_name(e) : std::string("ok"), eff, prm, bnd, nnp),
          e,
          Json::object()};
}

// A host process of the same uid (the suite's sleeper), changed by pid with calls that are not
// signals: its nice value, its descriptor limit, its I/O priority, its CPUs. Only the suite's own
// process is touched; the host compares it with how it was planted.
ProbeReport tamper_host_process(const std::string& pid_text) {
  pid_t pid = static_cast<pid_t>(std::atoi(pid_text.c_str()));
  errno = 0;
  int nice = ::getpriority(PRIO_PROCESS, static_cast<id_t>(pid));
  int e_get = errno;
  int e_nice = ::setpriority(PRIO_PROCESS, static_cast<id_t>(pid), 19) < 0 ? errno : 0;
  rlimit lim{777, 777};
  rlimit old{};
  int e_lim = ::prlimit(pid, RLIMIT_NOFILE, &lim, &old) < 0 ? errno : 0;
  constexpr int kIoprioIdle = 3 << 13;  // IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0)
  int e_io = ::syscall(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, pid, kIoprioIdle) < 0 ? errno : 0;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  int e_cpu = ::sched_setaffinity(pid, sizeof one, &one) < 0 ? errno : 0;
  auto said = [](int e) { return e ? err_name(e) : std::string("CHANGED"); };
  int first = e_nice ? e_nice : e_lim ? e_lim : e_io ? e_io : e_cpu;
  return {{},
          e_nice == 0 || e_lim == 0 || e_io == 0 || e_cpu == 0,
          fmt::format("getpriority({}): {}; setpriority({}, 19): {}; prlimit({}, NOFILE, 777): {}; "
                      "ioprio_set({}, idle): {}; sched_setaffinity({}, cpu 0): {}",
                      pid, e_get ? err_name(e_get) : fmt::format("nice {}", nice), pid, said(e_nice), pid,
                      said(e_lim), pid, said(e_io), pid, said(e_cpu)),
          first,
          Json::object()};
}

// SysV IPC objects the suite made on the host (0600, its own): attach the shared memory and read it,
// receive from the message queue. By id: ids are global to an IPC namespace.
ProbeReport read_sysv_ipc(const std::string& shm_text, const std::string& msg_text) {
  int shm = std::atoi(shm_text.c_str()), msg = std::atoi(msg_text.c_str());
  std::string seen;
  void* at = ::shmat(shm, nullptr, SHM_RDONLY);
  int e_shm = at == reinterpret_cast<void*>(-1) ? errno : 0;
  if (!e_shm) {
    seen += printable(std::string_view(static_cast<const char*>(at), strnlen(static_cast<const char*>(at), 200)));
    ::shmdt(at);
  }
  struct {
    long mtype;
    char mtext[256];
  } m{};
  ssize_t n = ::msgrcv(msg, &m, sizeof m.mtext, 0, IPC_NOWAIT | MSG_NOERROR);
  int e_msg = n < 0 ? errno : 0;
  if (n > 0) seen += " " + printable(std::string_view(m.mtext, static_cast<size_t>(n)));
  return {{},
          !e_shm || !e_msg,
          fmt::format("shmat({}): {}; msgrcv({}): {}; read: \"{}\"", shm,
                      e_shm ? err_name(e_shm) : std::string("ATTACHED"), msg,
                      e_msg ? err_name(e_msg) : std::string("RECEIVED"), seen),
          e_shm ? e_shm : e_msg,
          Json::object()};
}

// A directory of the host's the command may not read (the suite creates files in it while the
// probe runs): an inotify watch reports the names of what appears there all the same.
ProbeReport watch_host_directory(const std::string& dir) {
  int fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd < 0) return {{}, false, "inotify_init1: " + err_name(errno), errno, Json::object()};
  int wd = ::inotify_add_watch(fd, dir.c_str(), IN_CREATE | IN_MOVED_TO);
  if (wd < 0) {
    int e = errno;
    ::close(fd);
    return {{}, false, fmt::format("inotify_add_watch({}): {}", dir, err_name(e)), e, Json::object()};
  }
  std::vector<std::string> names;
  double until = monotonic_seconds(CLOCK_MONOTONIC) + 2.0;
  alignas(inotify_event) char buf[4096];
  while (names.size() < 5 && monotonic_seconds(CLOCK_MONOTONIC) < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    ssize_t n = ::read(fd, buf, sizeof buf);
    for (ssize_t off = 0; n > 0 && off < n;) {
      auto* ev = reinterpret_cast<inotify_event*>(buf + off);
      if (ev->len) names.push_back(printable(ev->name));
      off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
    }
  }
  ::close(fd);
  return {{},
          !names.empty(),
          fmt::format("inotify_add_watch({}): WATCHING; names seen: [{}]", dir, fmt::join(names, ", ")),
          0,
          Json::object()};
}

// The supervisor's own limits, which keep the wall clock (a supervisor without descriptors cannot
// wait for the deadline): lower its descriptor limit by one, by pid (the parent). The host reads
// the supervisor's report of its limits, which is the judge; inside a namespace or a guest the
// parent is someone else, and nothing changes there.
ProbeReport change_supervisor_limits() {
  pid_t parent = ::getppid();
  rlimit old{};
  int e_get = ::prlimit(parent, RLIMIT_NOFILE, nullptr, &old) < 0 ? errno : 0;
  rlimit lower = e_get ? rlimit{512, 512} : rlimit{old.rlim_cur > 64 ? old.rlim_cur - 1 : old.rlim_cur, old.rlim_max};
  int e_set = ::prlimit(parent, RLIMIT_NOFILE, &lower, nullptr) < 0 ? errno : 0;
  return {{},
          e_set == 0,
          fmt::format("prlimit({} (the parent), NOFILE): read {}; set soft {}: {}", parent,
                      e_get ? err_name(e_get) : fmt::format("soft {} hard {}", old.rlim_cur, old.rlim_max),
                      lower.rlim_cur, e_set ? err_name(e_set) : std::string("CHANGED")),
          e_set,
          Json::object()};
}

// ---- The network door's probes. Each goes the way an agent would: through the proxy the
// environment names when there is one, otherwise straight out (the host baseline has no door).

constexpr int kDoorWaitMs = 1000;  // how long a probe waits for an answer on loopback

// A connected TCP socket to ip:port (IPv4 or IPv6 literal), or -1 with errno.
int connect_to(const std::string& ip, int port) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family = AF_INET;
  if (ip.find(':') != std::string::npos) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET6, ip.c_str(), &a->sin6_addr) != 1) return errno = EINVAL, -1;
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET, ip.c_str(), &a->sin_addr) != 1) return errno = EINVAL, -1;
    len = sizeof *a;
  }
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{kDoorWaitMs / 1000, (kDoorWaitMs % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) < 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

// Sends `request` on a new connection to ip:port and reads until EOF or the wait runs out.
struct Exchanged {
  int err = 0;
  std::string reply;
  std::string said() const {
    if (err) return "connect: " + err_name(err);
    return reply.empty() ? std::string("no answer") : "\"" + printable(reply, 300) + "\"";
  }
};
Exchanged exchange(const std::string& ip, int port, const std::string& request) {
  int fd = connect_to(ip, port);
  if (fd < 0) return {errno, {}};
  write_all(fd, request);
  Exchanged x;
  char buf[4096];
  for (ssize_t n; x.reply.size() < 64 * 1024 && (n = ::read(fd, buf, sizeof buf)) > 0;)
    x.reply.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return x;
}

// The proxy the environment names (HTTP_PROXY and friends: "http://ADDRESS:PORT"), if any.
struct ProxyEnv {
  std::string ip;
  int port = 0;
};
std::optional<ProxyEnv> proxy_from_env() {
  for (const char* name : {"http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"}) {
    const char* v = ::getenv(name);
    if (!v) continue;
    std::string url = v;
    if (url.rfind("http://", 0) == 0) url = url.substr(7);
    while (!url.empty() && url.back() == '/') url.pop_back();
    auto colon = url.rfind(':');
    if (colon == std::string::npos) continue;
    return ProxyEnv{url.substr(0, colon), std::atoi(url.c_str() + colon + 1)};
  }
  return std::nullopt;
}

std::string http_get(std::string_view target, std::string_view host, const std::string& marker, bool close) {
  return fmt::format("GET {} HTTP/1.1\r\nHost: {}\r\n{}: {}\r\n{}\r\n", target, host, escape::kRunHeader,
                     marker, close ? "Connection: close\r\n" : "");
}

// Asks the DNS server on 127.0.0.1:port for `name`'s A records.
struct Looked {
  int err = 0;
  std::vector<std::string> addrs;
  bool answered = false;
  std::string said() const {
    if (err) return err_name(err);
    if (!answered) return "no answer";
    return addrs.empty() ? std::string("answered: no address")
                         : fmt::format("answered {}", fmt::join(addrs, ", "));
  }
};
Looked dns_lookup(int port, const std::string& name) {
  Looked l;
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {errno, {}, false};
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  auto id = static_cast<uint16_t>(::getpid() ^ port);
  std::string q = escape::encode_dns_query(id, name);
  if (::sendto(fd, q.data(), q.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to) < 0) {
    l.err = errno;
  } else {
    pollfd p{fd, POLLIN, 0};
    char buf[512];
    if (::poll(&p, 1, kDoorWaitMs) == 1) {
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0) l.err = errno;
      auto a =
          n > 0 ? escape::parse_dns_answer(std::string_view(buf, static_cast<size_t>(n)), id) : std::nullopt;
      if (a) {
        l.answered = true;
        l.addrs = *a;
      }
    }
  }
  ::close(fd);
  return l;
}

bool from_forbidden(const std::string& reply) {
  return reply.find(fmt::format("hello from {}", escape::kDoorForbiddenHost)) != std::string::npos;
}

// A DNS query to the suite's resolver on loopback, for a name that carries data out (the run's
// marker). A sandbox behind a door has no resolver: the door resolves names, the code never does.
ProbeReport door_dns_query(int dns_port, const std::string& marker) {
  std::string name = fmt::format("{}.{}", marker.substr(marker.rfind('/') + 1), escape::kDoorExfilDomain);
  Looked l = dns_lookup(dns_port, name);
  return {{},
          l.answered,
          fmt::format("DNS query for {} to 127.0.0.1:{}: {}", name, dns_port, l.said()),
          l.err,
          Json::object()};
}

// A raw TCP connection to the allowed server's address, around the proxy.
ProbeReport door_direct_tcp(int http_port, const std::string& marker) {
  auto x = exchange("127.0.0.1", http_port, http_get("/direct-tcp", escape::kDoorAllowedHost, marker, true));
  bool got = x.reply.find(" 200 ") != std::string::npos;
  return {{},
          got,
          fmt::format("straight to 127.0.0.1:{} (the allowed server), not through the proxy: {}", http_port,
                      x.said()),
          x.err,
          Json::object()};
}

// A UDP datagram to a listener on loopback.
ProbeReport door_udp(int udp_port, const std::string& marker) {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {{}, false, "socket(AF_INET, SOCK_DGRAM): " + err_name(errno), errno, Json::object()};
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(udp_port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string msg = "door_udp " + marker + "\n";
  int e =
      ::sendto(fd, msg.data(), msg.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to) < 0 ? errno : 0;
  ::close(fd);
  return {{},
          e == 0,
          fmt::format("sendto 127.0.0.1:{}: {}", udp_port, e ? err_name(e) : std::string("SENT")),
          e,
          Json::object()};
}

// A TCP connection over IPv6 to a listener on ::1.
ProbeReport door_ipv6(int port, const std::string& marker) {
  int fd = connect_to("::1", port);
  int e = fd < 0 ? errno : 0;
  if (fd >= 0) {
    write_all(fd, "door_ipv6 " + marker + "\n");
    ::close(fd);
  }
  return {{},
          fd >= 0,
          fmt::format("connect [::1]:{}: {}", port, e ? err_name(e) : std::string("CONNECTED")),
          e,
          Json::object()};
}

// Through the door to a host not on the list: a second request pipelined on a kept-alive
// connection, a Host header that names it, and a request relayed inside a CONNECT tunnel to the
// allowed host. Without a door (the host baseline) straight to it, as the whole network allows.
ProbeReport door_relay_forbidden(int http_port, int dns_port, const std::string& marker) {
  std::string allowed = fmt::format("{}:{}", escape::kDoorAllowedHost, http_port);
  std::string forbidden = fmt::format("{}:{}", escape::kDoorForbiddenHost, http_port);
  auto proxy = proxy_from_env();
  if (!proxy) {
    Looked l = dns_lookup(dns_port, std::string(escape::kDoorForbiddenHost));
    if (l.addrs.empty())
      return {{},
              false,
              fmt::format("no proxy; {} did not resolve: {}", escape::kDoorForbiddenHost, l.said()),
              l.err,
              Json::object()};
    auto x = exchange(l.addrs[0], http_port, http_get("/direct-forbidden", forbidden, marker, true));
    return {
        {},
        from_forbidden(x.reply),
        fmt::format("no proxy in the environment: straight to {} ({}): {}", forbidden, l.addrs[0], x.said()),
        x.err,
        Json::object()};
  }
  auto pipelined =
      exchange(proxy->ip, proxy->port,
               http_get(fmt::format("http://{}/first", allowed), allowed, marker, false) +
                   http_get(fmt::format("http://{}/pipelined", forbidden), forbidden, marker, true));
  auto host_header =
      exchange(proxy->ip, proxy->port,
               http_get(fmt::format("http://{}/host-header", allowed), forbidden, marker, true));
  auto relayed = exchange(proxy->ip, proxy->port,
                          fmt::format("CONNECT {0} HTTP/1.1\r\nHost: {0}\r\n\r\n", allowed) +
                              http_get(fmt::format("http://{}/relayed", forbidden), forbidden, marker, true));
  bool got =
      from_forbidden(pipelined.reply) || from_forbidden(host_header.reply) || from_forbidden(relayed.reply);
  return {
      {},
      got,
      fmt::format("through the door at {}:{}: pipelined after an allowed request: {}; Host header {}: {}; "
                  "inside a CONNECT to {}: {}",
                  proxy->ip, proxy->port, pipelined.said(), forbidden, host_header.said(), allowed,
                  relayed.said()),
      pipelined.err,
      Json::object()};
}

// A name whose answer changes between lookups: the allowed address first, then a forbidden one.
// Through the door, twice (a door that checks one lookup and connects by another is fooled);
// without one, the check-then-connect of a naive client.
ProbeReport door_rebinding_name(int http_port, int dns_port, const std::string& marker) {
  std::string host = fmt::format("{}:{}", escape::kDoorRebindHost, http_port);
  auto proxy = proxy_from_env();
  if (!proxy) {
    Looked first = dns_lookup(dns_port, std::string(escape::kDoorRebindHost));
    Looked second = dns_lookup(dns_port, std::string(escape::kDoorRebindHost));
    if (second.addrs.empty())
      return {{},
              false,
              fmt::format("no proxy; {} did not resolve a second time: {}", escape::kDoorRebindHost,
                          second.said()),
              second.err,
              Json::object()};
    auto x = exchange(second.addrs[0], http_port, http_get("/direct-rebound", host, marker, true));
    return {{},
            from_forbidden(x.reply),
            fmt::format("no proxy in the environment: {} checked as {}, then connected to {}: {}",
                        escape::kDoorRebindHost, first.said(), second.addrs[0], x.said()),
            x.err,
            Json::object()};
  }
  auto one =
      exchange(proxy->ip, proxy->port, http_get(fmt::format("http://{}/first", host), host, marker, true));
  auto two =
      exchange(proxy->ip, proxy->port, http_get(fmt::format("http://{}/rebound", host), host, marker, true));
  return {{},
          from_forbidden(one.reply) || from_forbidden(two.reply),
          fmt::format("through the door at {}:{}: first request: {}; second: {}", proxy->ip, proxy->port,
                      one.said(), two.said()),
          one.err ? one.err : two.err,
          Json::object()};
}

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
  // The door probes' arguments: the allowed server's, the DNS responder's, the UDP sink's and the
  // ::1 listener's ports.
  auto port = [&](size_t i) { return std::atoi(arg(i).c_str()); };
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
    case Breach::HoldCapabilities:
      r = hold_capabilities();
      break;
    case Breach::TamperHostProcess:
      r = tamper_host_process(arg(0));
      break;
    case Breach::ReadSysvIpc:
      r = read_sysv_ipc(arg(0), arg(1));
      break;
    case Breach::WatchHostDirectory:
      r = watch_host_directory(arg(0));
      break;
    case Breach::ChangeSupervisorLimits:
      r = change_supervisor_limits();
      break;
    case Breach::PlantGitHook:
    case Breach::PlantShellRc:
    case Breach::PlantAgentSettings:
      r = plant(*breach, arg(0));
      break;
    case Breach::ReadThroughHardLink:
      r = read_through_hard_link(arg(0));
      break;
    case Breach::DoorDnsQuery:
      r = door_dns_query(port(1), o.marker);
      break;
    case Breach::DoorDirectTcp:
      r = door_direct_tcp(port(0), o.marker);
      break;
    case Breach::DoorUdp:
      r = door_udp(port(2), o.marker);
      break;
    case Breach::DoorIpv6:
      r = door_ipv6(port(3), o.marker);
      break;
    case Breach::DoorRelayForbidden:
      r = door_relay_forbidden(port(0), port(1), o.marker);
      break;
    case Breach::DoorRebinding:
      r = door_rebinding_name(port(0), port(1), o.marker);
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
