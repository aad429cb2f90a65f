// Canaries: plant the escape suite's bait in a temp dir and the suite's own process, remove it all.
#include "escape/canaries.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/resource.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "base/fs.h"
#include "base/hash.h"
#include "escape/dns_wire.h"
#include "escape/escape_suite.h"

namespace airlock::escape {
namespace {

Result<void> write_new_file(const std::string& path, std::string_view content, mode_t mode) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd) return fail_errno(Code::IoError, "cannot create " + path, errno);
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = ::write(fd.get(), content.data() + off, content.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno(Code::IoError, "cannot write " + path, errno);
    off += static_cast<size_t>(n);
  }
  if (::fchmod(fd.get(), mode) < 0) return fail_errno(Code::IoError, "chmod " + path, errno);
  return {};
}

Result<void> copy_file(const std::string& from, const std::string& to, mode_t mode) {
  UniqueFd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) return fail_errno(Code::IoError, "cannot open " + from, errno);
  UniqueFd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!out) return fail_errno(Code::IoError, "cannot create " + to, errno);
  for (;;) {
    ssize_t n = ::sendfile(out.get(), in.get(), nullptr, 1 << 30);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno(Code::IoError, "cannot copy " + from + " to " + to, errno);
    if (n == 0) break;
  }
  if (::fchmod(out.get(), mode) < 0) return fail_errno(Code::IoError, "chmod " + to, errno);
  return {};
}

Result<void> make_dir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) < 0) return fail_errno(Code::IoError, "mkdir " + path, errno);
  if (::chmod(path.c_str(), mode) < 0) return fail_errno(Code::IoError, "chmod " + path, errno);
  return {};
}

Result<UniqueFd> listen_on(const sockaddr* addr, socklen_t len, int family, const std::string& what) {
  UniqueFd fd(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return fail_errno(Code::IoError, "socket for the " + what + " listener", errno);
  if (::bind(fd.get(), addr, len) < 0)
    return fail_errno(Code::IoError, "bind the " + what + " listener", errno);
  if (::listen(fd.get(), 16) < 0)
    return fail_errno(Code::IoError, "listen on the " + what + " listener", errno);
  return fd;
}

std::string first_line_of(int fd) {
  std::string got;
  char buf[256];
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (got.find('\n') == std::string::npos && got.size() < sizeof buf) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  if (auto nl = got.find('\n'); nl != std::string::npos) got.resize(nl);
  return got;
}

// SigPnd / ShdPnd of /proc/<pid>/status: the signals pending at the thread and the process.
uint64_t pending_mask(pid_t pid) {
  auto status = read_file("/proc/" + std::to_string(pid) + "/status");
  if (!status) return 0;
  uint64_t mask = 0;
  for (const char* key : {"\nSigPnd:", "\nShdPnd:"}) {
    auto at = status->find(key);
    if (at == std::string::npos) continue;
    mask |= std::strtoull(status->c_str() + at + std::strlen(key), nullptr, 16);
  }
  return mask;
}

bool contains(const std::vector<pid_t>& v, pid_t p) { return std::find(v.begin(), v.end(), p) != v.end(); }

Result<UniqueFd> udp_on_loopback(int* port, const std::string& what) {
  UniqueFd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return fail_errno(Code::IoError, "socket for the " + what, errno);
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof in;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&in), len) < 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&in), &len) < 0)
    return fail_errno(Code::IoError, "bind the " + what, errno);
  *port = ntohs(in.sin_port);
  return fd;
}

}  // namespace

// The door's bait. The servers are declared last, so they stop (and stop calling record) first.
struct Canaries::Door {
  std::mutex mu;
  std::vector<broker::HttpRequest> allowed_seen, forbidden_seen;  // guarded by mu
  std::vector<std::string> queries;                               // guarded by mu
  std::map<std::string, int> lookups;                             // guarded by mu
  UniqueFd dns, udp, ipv6, stop;
  std::thread dns_thread;
  std::unique_ptr<broker::LoopbackHttp> allowed, forbidden;

  // The one table both the DNS responder and the door's resolver answer from.
  std::vector<std::string> answer(const std::string& host) {
    std::lock_guard lk(mu);
    if (host == kDoorAllowedHost) return {"127.0.0.1"};
    if (host == kDoorForbiddenHost) return {"127.0.0.2"};
    if (host == kDoorRebindHost) return {lookups[host]++ == 0 ? "127.0.0.1" : "127.0.0.2"};
    return {};
  }

  void serve_dns() {
    pollfd p[2] = {{dns.get(), POLLIN, 0}, {stop.get(), POLLIN, 0}};
    while (::poll(p, 2, -1) >= 0 || errno == EINTR) {
      if (p[1].revents) return;
      if (!(p[0].revents & POLLIN)) continue;
      char buf[512];
      sockaddr_storage from{};
      socklen_t len = sizeof from;
      ssize_t n = ::recvfrom(dns.get(), buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len);
      if (n <= 0) continue;
      auto q = parse_dns_question(std::string_view(buf, static_cast<size_t>(n)));
      if (!q) continue;
      {
        std::lock_guard lk(mu);
        queries.push_back(q->name);
      }
      std::string reply = encode_dns_answer(*q, q->qtype == 1 ? answer(q->name) : std::vector<std::string>{});
      (void)::sendto(dns.get(), reply.data(), reply.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
    }
  }

  ~Door() {
    allowed.reset();
    forbidden.reset();
    if (dns_thread.joinable()) {
      uint64_t one = 1;
      (void)!::write(stop.get(), &one, sizeof one);
      dns_thread.join();
    }
  }
};

Result<void> Canaries::plant_door() {
  door_ = std::make_unique<Door>();
  Door& d = *door_;
  DoorBait& b = bait_.door;
  auto server = [&d](bool forbidden) {
    return [&d, forbidden](const broker::HttpRequest& r) {
      {
        std::lock_guard lk(d.mu);
        (forbidden ? d.forbidden_seen : d.allowed_seen).push_back(r);
      }
      return broker::HttpReply{
          200,
          {{"Content-Type", "text/plain"}},
          fmt::format("hello from {}\n", forbidden ? kDoorForbiddenHost : kDoorAllowedHost)};
    };
  };
  // The forbidden server on 127.0.0.2 at the allowed one's port: a name that rebinds keeps its port.
  for (int attempt = 0; attempt < 20 && !d.forbidden; ++attempt) {
    d.allowed = TRY(broker::LoopbackHttp::start("127.0.0.1", 0, server(false)));
    auto f = broker::LoopbackHttp::start("127.0.0.2", d.allowed->port(), server(true));
    if (f) d.forbidden = std::move(*f);
  }
  if (!d.forbidden)
    return fail(Code::ConfigError, "no port free on both 127.0.0.1 and 127.0.0.2 for the door's servers");
  b.http_port = d.allowed->port();
  d.dns = TRY(udp_on_loopback(&b.dns_port, "DNS responder"));
  d.udp = TRY(udp_on_loopback(&b.udp_port, "UDP sink"));
  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  in6.sin6_addr = in6addr_loopback;
  if (auto fd = listen_on(reinterpret_cast<sockaddr*>(&in6), sizeof in6, AF_INET6, "ipv6")) {
    d.ipv6 = std::move(*fd);
    socklen_t len = sizeof in6;
    if (::getsockname(d.ipv6.get(), reinterpret_cast<sockaddr*>(&in6), &len) < 0)
      return fail_errno(Code::IoError, "getsockname", errno);
    b.ipv6_port = ntohs(in6.sin6_port);
  } else {
    b.ipv6_missing = fd.error().message;
  }
  d.stop = UniqueFd(::eventfd(0, EFD_CLOEXEC));
  if (!d.stop) return fail_errno(Code::IoError, "eventfd", errno);
  d.dns_thread = std::thread([&d] { d.serve_dns(); });
  return {};
}

std::vector<broker::HttpRequest> Canaries::take_requests(bool forbidden) {
  std::lock_guard lk(door_->mu);
  return std::exchange(forbidden ? door_->forbidden_seen : door_->allowed_seen, {});
}

std::vector<std::string> Canaries::take_dns_queries() {
  std::lock_guard lk(door_->mu);
  return std::exchange(door_->queries, {});
}

std::vector<std::string> Canaries::take_datagrams() {
  std::vector<std::string> out;
  char buf[512];
  for (ssize_t n; (n = ::recv(door_->udp.get(), buf, sizeof buf, MSG_DONTWAIT)) >= 0;)
    out.emplace_back(buf, static_cast<size_t>(n));
  return out;
}

egress::Resolver Canaries::resolver() {
  return [d = door_.get()](const std::string& host) -> Result<std::vector<egress::IpAddress>> {
    std::vector<egress::IpAddress> out;
    for (const auto& a : d->answer(host))
      if (auto ip = egress::parse_literal(a)) out.push_back(*ip);
    if (out.empty()) return fail(Code::EgressDenied, host + " does not resolve (the escape suite's names)");
    return out;
  };
}

void Canaries::reset_names() {
  std::lock_guard lk(door_->mu);
  door_->lookups.clear();
}

std::vector<pid_t> children_of_self() {
  std::vector<pid_t> out;
  std::string task_dir = "/proc/self/task";
  DIR* d = ::opendir(task_dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    auto text = read_file(task_dir + "/" + e->d_name + "/children");
    if (!text) continue;
    const char* p = text->c_str();
    char* end = nullptr;
    for (long pid = std::strtol(p, &end, 10); end != p; pid = std::strtol(p, &end, 10)) {
      if (pid > 0 && !contains(out, static_cast<pid_t>(pid))) out.push_back(static_cast<pid_t>(pid));
      p = end;
    }
  }
  ::closedir(d);
  return out;
}

std::string process_cmdline(pid_t pid) {
  auto text = read_file("/proc/" + std::to_string(pid) + "/cmdline");
  if (!text) return "";
  std::replace(text->begin(), text->end(), '\0', ' ');
  while (!text->empty() && text->back() == ' ') text->pop_back();
  return *text;
}

bool process_running(pid_t pid) {
  if (pid <= 0) return false;
  auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  // The state follows the command name in parentheses, which may itself hold ')'.
  auto close = stat->rfind(')');
  return close != std::string::npos && close + 2 < stat->size() && (*stat)[close + 2] != 'Z' &&
         (*stat)[close + 2] != 'X';
}

Result<std::unique_ptr<Canaries>> Canaries::plant(const std::string& probe_binary) {
  // Like airlock-serve, part of the installation: without it the suite cannot run anywhere.
  if (::access(probe_binary.c_str(), X_OK) < 0)
    return fail(Code::ConfigError,
                fmt::format("cannot run {}: {}; the escape suite's probes are that executable, installed "
                            "beside airlock",
                            probe_binary, std::strerror(errno)),
                Json{{"path", probe_binary}});
  std::string tmpl(kCanaryDirTemplate);
  if (!::mkdtemp(tmpl.data())) return fail_errno(Code::IoError, "mkdtemp " + tmpl, errno);
  std::unique_ptr<Canaries> c(new Canaries());
  Bait& b = c->bait_;
  b.root = tmpl;  // from here on the destructor removes it, whatever fails below
  b.probe_binary = b.root + "/" + std::string(kProbeProgram);
  TRY(copy_file(probe_binary, b.probe_binary, 0755));

  b.secret_token = "airlock-canary-host-file-" + random_id();
  b.secret_file = b.root + "/secret/host-secret.txt";
  TRY(make_dir(b.root + "/secret", 0700));
  TRY(write_new_file(b.secret_file, b.secret_token + "\n", 0600));

  b.key_token = "airlock-canary-credential-" + random_id();
  b.key_file = b.root + "/home/.ssh/id_canary";
  TRY(make_dir(b.root + "/home", 0700));
  TRY(make_dir(b.root + "/home/.ssh", 0700));
  TRY(write_new_file(
      b.key_file,
      "-----BEGIN OPENSSH PRIVATE KEY-----\n" + b.key_token + "\n-----END OPENSSH PRIVATE KEY-----\n", 0600));

  b.outside_dir = b.root + "/outside";
  TRY(make_dir(b.outside_dir, 0700));

  // The secret in the suite's own environment, for as long as this tier runs.
  b.env_token = "airlock-canary-env-" + random_id();
  std::string env_name(kCanaryEnvName);
  if (const char* old = ::getenv(env_name.c_str())) c->saved_env_ = old;
  if (::setenv(env_name.c_str(), b.env_token.c_str(), 1) < 0)
    return fail_errno(Code::IoError, "setenv " + env_name, errno);
  c->env_set_ = true;

  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  c->tcp_ = TRY(listen_on(reinterpret_cast<sockaddr*>(&in), sizeof in, AF_INET, "tcp"));
  socklen_t len = sizeof in;
  if (::getsockname(c->tcp_.get(), reinterpret_cast<sockaddr*>(&in), &len) < 0)
    return fail_errno(Code::IoError, "getsockname", errno);
  b.tcp_port = ntohs(in.sin_port);

  TRY(make_dir(b.root + "/sock", 0700));
  b.unix_socket = b.root + "/sock/agent.sock";
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  if (b.unix_socket.size() >= sizeof un.sun_path) return fail(Code::InternalError, "unix socket path too long");
  std::memcpy(un.sun_path, b.unix_socket.c_str(), b.unix_socket.size() + 1);
  c->unix_ = TRY(listen_on(reinterpret_cast<sockaddr*>(&un), sizeof un, AF_UNIX, "unix"));

  b.abstract_socket = "airlock-escape-" + random_id();
  sockaddr_un ab{};
  ab.sun_family = AF_UNIX;
  std::memcpy(ab.sun_path + 1, b.abstract_socket.data(), b.abstract_socket.size());
  c->abstract_ =
      TRY(listen_on(reinterpret_cast<sockaddr*>(&ab),
                    static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + b.abstract_socket.size()),
                    AF_UNIX, "abstract unix"));

  // The host process: the probe program, exec'd as `airlock-probe host_sleeper`, so its cmdline
  // holds a token a probe can only show by reading it. SIGUSR1 stays blocked in it.
  b.sleeper_token = "airlock-canary-process-" + random_id();
  std::vector<std::string> argv_s = {std::string(kProbeProgram), std::string(kSleeperProbe), "--run", b.root,
                                     b.sleeper_token};
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  char* envp[] = {nullptr};
  pid_t parent = ::getpid();
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pid_t pid = ::fork();
  if (pid < 0) return fail_errno(Code::IoError, "fork the host sleeper", errno);
  if (pid == 0) {
    // Dies with the suite, whatever happens to it.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || ::getppid() != parent) ::_exit(120);
    ::sigprocmask(SIG_BLOCK, &usr1, nullptr);
    ::execve(b.probe_binary.c_str(), argv.data(), envp);
    ::_exit(121);
  }
  auto pidfd = open_pidfd(pid);
  if (!pidfd) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return std::unexpected(pidfd.error());
  }
  c->sleeper_ = ChildProcess(pid, std::move(*pidfd));
  b.sleeper_pid = pid;
  for (int i = 0; i < 400 && process_cmdline(pid).find(b.sleeper_token) == std::string::npos; ++i) {
    // Its exec failed: a host whose /tmp may not run programs cannot run the suite.
    if (!process_running(pid)) return fail(Code::ConfigError, "the host sleeper process exited at start");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (process_cmdline(pid).find(b.sleeper_token) == std::string::npos)
    return fail(Code::ConfigError, "the host sleeper process did not start");
  b.sleeper_planted = c->sleeper_state();

  // SysV IPC of the suite's own, 0600: a segment and a queue holding one message.
  b.ipc_token = "airlock-canary-sysv-ipc-" + random_id();
  b.shm_id = ::shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
  if (b.shm_id < 0) return fail_errno(Code::IoError, "shmget", errno);
  void* at = ::shmat(b.shm_id, nullptr, 0);
  if (at == reinterpret_cast<void*>(-1)) return fail_errno(Code::IoError, "shmat", errno);
  std::memcpy(at, b.ipc_token.c_str(), b.ipc_token.size() + 1);
  ::shmdt(at);
  b.msg_id = ::msgget(IPC_PRIVATE, IPC_CREAT | 0600);
  if (b.msg_id < 0) return fail_errno(Code::IoError, "msgget", errno);
  struct {
    long mtype;
    char mtext[128];
  } m{1, {}};
  std::snprintf(m.mtext, sizeof m.mtext, "%s", b.ipc_token.c_str());
  if (::msgsnd(b.msg_id, &m, b.ipc_token.size(), IPC_NOWAIT) < 0)
    return fail_errno(Code::IoError, "msgsnd", errno);

  b.watched_dir = b.root + "/watched";
  b.watched_token = "airlock-canary-watched-" + random_id();
  TRY(make_dir(b.watched_dir, 0700));
  TRY(c->plant_door());
  return c;
}

Canaries::~Canaries() {
  if (sleeper_.running()) {
    (void)sleeper_.signal(SIGKILL);
    (void)sleeper_.wait();
  }
  if (!bait_.root.empty()) (void)kill_leftovers();
  if (bait_.shm_id >= 0) ::shmctl(bait_.shm_id, IPC_RMID, nullptr);
  if (bait_.msg_id >= 0) ::msgctl(bait_.msg_id, IPC_RMID, nullptr);
  door_.reset();
  tcp_.reset();
  unix_.reset();
  abstract_.reset();
  if (env_set_) {
    std::string env_name(kCanaryEnvName);
    if (saved_env_)
      ::setenv(env_name.c_str(), saved_env_->c_str(), 1);
    else
      ::unsetenv(env_name.c_str());
  }
  if (!bait_.root.empty()) (void)remove_tree(bait_.root);
}

Result<std::string> Canaries::make_workspace(std::string_view name) {
  std::string ws = bait_.root + "/ws-" + std::string(name);
  TRY(make_dir(ws, 0700));
  TRY(make_dir(ws + "/.probe", 0755));
  std::string probe = ws + "/.probe/" + std::string(kProbeProgram);
  // A copy, never a hard link: the view leaves out every file with a second link (its other name
  // may lie outside the workspace), so a linked probe would never reach the sandbox.
  TRY(copy_file(bait_.probe_binary, probe, 0755));
  TRY(make_dir(ws + "/out", 0755));
  // What the plant probes would change, as a real repository holds it: a git directory with its
  // configuration and hooks, a shell start-up file.
  TRY(make_dir(ws + "/out/.git", 0755));
  TRY(make_dir(ws + "/out/.git/hooks", 0755));
  TRY(write_file_atomic(ws + "/out/.git/config", "[core]\n\trepositoryformatversion = 0\n", 0644));
  TRY(write_file_atomic(ws + "/out/.bashrc", "# the user's own\n", 0644));
  return ws;
}

std::vector<Connection> Canaries::take_connections() {
  std::vector<Connection> out;
  std::pair<const char*, int> listeners[] = {{"tcp", tcp_.get()},
                                             {"unix", unix_.get()},
                                             {"abstract", abstract_.get()},
                                             {"ipv6", door_ ? door_->ipv6.get() : -1}};
  for (auto [name, fd] : listeners) {
    if (fd < 0) continue;
    for (;;) {
      UniqueFd conn(::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC));
      if (!conn) break;
      out.push_back({name, first_line_of(conn.get())});
    }
  }
  return out;
}

bool Canaries::sleeper_has_pending(int sig) const {
  return (pending_mask(bait_.sleeper_pid) >> (sig - 1)) & 1u;
}

bool Canaries::sleeper_alive() const { return process_running(bait_.sleeper_pid); }

std::string Canaries::sleeper_state() const {
  pid_t pid = bait_.sleeper_pid;
  errno = 0;
  int nice = ::getpriority(PRIO_PROCESS, static_cast<id_t>(pid));
  std::string nice_s = errno ? std::string("?") : std::to_string(nice);
  rlimit lim{};
  std::string lim_s = ::prlimit(pid, RLIMIT_NOFILE, nullptr, &lim) < 0
                          ? std::string("?")
                          : fmt::format("{}/{}", lim.rlim_cur, lim.rlim_max);
  long io = ::syscall(SYS_ioprio_get, 1 /* IOPRIO_WHO_PROCESS */, pid);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  std::string cpu_s = ::sched_getaffinity(pid, sizeof cpus, &cpus) < 0 ? std::string("?")
                                                                       : std::to_string(CPU_COUNT(&cpus));
  return fmt::format("nice {}, NOFILE {}, ioprio {:#x}, cpus {}", nice_s, lim_s, io, cpu_s);
}

long Canaries::ipc_messages_left() const {
  msqid_ds ds{};
  if (::msgctl(bait_.msg_id, IPC_STAT, &ds) < 0) return -1;
  return static_cast<long>(ds.msg_qnum);
}

std::shared_ptr<void> Canaries::churn_watched_dir() {
  struct Churn {
    std::atomic<bool> stop = false;
    std::thread t;
    ~Churn() {
      stop = true;
      if (t.joinable()) t.join();
    }
  };
  auto c = std::make_shared<Churn>();
  c->t = std::thread([c = c.get(), dir = bait_.watched_dir, token = bait_.watched_token] {
    for (int i = 0; !c->stop; ++i) {
      std::string path = fmt::format("{}/{}-{}", dir, token, i);
      UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
      fd.reset();
      ::unlink(path.c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  return c;
}

std::shared_ptr<Canaries::SeenStatus> Canaries::watch_status_of(std::string needle, std::shared_ptr<void>* guard) {
  auto seen = std::make_shared<SeenStatus>();
  struct Watch {
    std::atomic<bool> stop = false;
    std::thread t;
    ~Watch() {
      stop = true;
      if (t.joinable()) t.join();
    }
  };
  auto w = std::make_shared<Watch>();
  pid_t self = ::getpid();
  w->t = std::thread([w = w.get(), seen, needle = std::move(needle), self] {
    while (!w->stop) {
      if (DIR* d = ::opendir("/proc")) {
        while (dirent* e = ::readdir(d)) {
          char* end = nullptr;
          long pid = std::strtol(e->d_name, &end, 10);
          if (*end != '\0' || pid <= 0 || pid == self) continue;
          if (process_cmdline(static_cast<pid_t>(pid)).find(needle) == std::string::npos) continue;
          // The probe itself (its argv[0] is the probe program), not a process that only carries
          // its arguments: the container engine's client, whose command line holds the probe's.
          auto raw = read_file("/proc/" + std::to_string(pid) + "/cmdline");
          if (!raw) continue;
          std::string argv0 = raw->substr(0, raw->find('\0'));
          if (!argv0.ends_with("/" + std::string(kProbeProgram)) && argv0 != kProbeProgram) continue;
          auto status = read_file("/proc/" + std::to_string(pid) + "/status");
          if (!status) continue;
          std::lock_guard lk(seen->mu);
          std::vector<std::string> lines;
          auto field = [&](const char* key) -> std::string {
            auto at = status->find(std::string("\n") + key + ":");
            if (at == std::string::npos) return "";
            at += std::strlen(key) + 2;
            auto eol = status->find('\n', at);
            std::string v = status->substr(at, eol - at);
            v.erase(0, v.find_first_not_of(" \t"));
            lines.push_back(fmt::format("{} {}", key, v));
            return v;
          };
          seen->eff = std::strtoull(field("CapEff").c_str(), nullptr, 16);
          seen->prm = std::strtoull(field("CapPrm").c_str(), nullptr, 16);
          seen->amb = std::strtoull(field("CapAmb").c_str(), nullptr, 16);
          seen->bnd = std::strtoull(field("CapBnd").c_str(), nullptr, 16);
          std::string nnp = field("NoNewPrivs");
          seen->no_new_privs = nnp.empty() ? -1 : std::atoi(nnp.c_str());
          seen->pid = static_cast<pid_t>(pid);
          seen->status = fmt::format("{}", fmt::join(lines, "; "));
          w->stop = true;  // the first sighting is the one judged
          break;
        }
        ::closedir(d);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  *guard = w;
  return seen;
}

std::vector<pid_t> Canaries::kill_leftovers() {
  std::vector<pid_t> running;
  pid_t self = ::getpid();
  auto note = [&](pid_t pid) {
    if (process_running(pid) && !contains(running, pid)) running.push_back(pid);
  };
  for (int round = 0; round < 300; ++round) {
    bool any = false;
    // Whatever was re-parented to us (we are a child subreaper) or is a child we did not make.
    for (pid_t pid : children_of_self()) {
      if (pid == bait_.sleeper_pid || contains(foreign_children_, pid)) continue;
      any = true;
      note(pid);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, WNOHANG);
    }
    // Whatever carries the run marker anywhere on the host (a probe re-parented elsewhere).
    if (DIR* d = ::opendir("/proc")) {
      while (dirent* e = ::readdir(d)) {
        char* end = nullptr;
        long pid = std::strtol(e->d_name, &end, 10);
        if (*end != '\0' || pid <= 0 || pid == self || pid == bait_.sleeper_pid) continue;
        if (process_cmdline(static_cast<pid_t>(pid)).find(bait_.root) == std::string::npos) continue;
        any = true;
        note(static_cast<pid_t>(pid));
        ::kill(static_cast<pid_t>(pid), SIGKILL);
      }
      ::closedir(d);
    }
    if (!any) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return running;
}

}  // namespace airlock::escape
