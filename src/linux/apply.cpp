// The apply sequence: supervisor and command processes, set up between clone and exec
// without allocating (STYLE.md rule 5). The order of the command's steps matters:
//   chdir, fds, rlimits  - plain process state, any order, before confinement;
//   no_new_privs         - Landlock and unprivileged seccomp both require it;
//   landlock             - before seccomp, so the filter may later forbid its syscalls;
//   seccomp last         - it forbids syscalls the earlier steps use (mount, unshare, ...).
#include "linux/apply.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "linux/caps.h"
#include "linux/cgroup.h"
#include "linux/netns.h"
#include "linux/fds.h"
#include "linux/landlock.h"
#include "linux/seccomp.h"

namespace airlock::linux {

namespace {

struct SetupFailure {
  Step step;
  int32_t err;
};

// fork-like clone3 returning a pidfd. Raw, so no atfork handlers or libc locks run in the child.
pid_t clone_with_pidfd(int* pidfd, uint64_t extra_flags = 0) noexcept {
  clone_args args{};
  args.flags = CLONE_PIDFD | extra_flags;
  args.pidfd = reinterpret_cast<uint64_t>(pidfd);
  args.exit_signal = SIGCHLD;
  return static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
}

// A clone that shares our memory, vfork-style: no page tables are copied and nothing faults
// copy-on-write, and we are suspended until the child's execve succeeded or it exited (as
// posix_spawn does). The child runs `body(arg)` on a stack of its own (a guard page below it) and
// must touch nothing of ours but read-only data and that stack: it is a separate process (its
// own descriptor table, signal handlers and credentials), so its closes, confinement and
// process state stay its own. But the address space is ours: nothing in the child may allocate
// or change the memory map (mmap, munmap, brk, madvise) or set a property of the mm
// (PR_SET_MDWE, PR_SET_THP_DISABLE, PR_SET_DUMPABLE, PR_SET_MM) before its execve.
// Returns the child's pid with its pidfd in *pidfd, or -1 (errno).
pid_t clone_vfork(int* pidfd, int (*body)(void*), void* arg) noexcept {
  constexpr size_t kGuard = 4096, kStack = 256 * 1024;
  void* map = ::mmap(nullptr, kGuard + kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (map == MAP_FAILED) return -1;
  pid_t pid = -1;
  if (::mprotect(map, kGuard, PROT_NONE) == 0)
    pid = ::clone(body, static_cast<char*>(map) + kGuard + kStack, CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD,
                  arg, pidfd);
  int e = errno;
  ::munmap(map, kGuard + kStack);
  errno = e;
  return pid;
}

// The command's own part of a launch, as the child reads it: C strings and descriptors. A cold
// launch points it into the parent's LaunchSpec (copied with the process); a warm sandbox
// receives it into a mapping of its own (receive_command).
struct CommandArgs {
  const char* path = "";
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* cwd = "";
  char* const* make_dirs = nullptr;  // null-terminated
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1, fd3 = -1;
};

// What start_warm sends: the supervisor's start, then the init's command (a header with the
// descriptors attached, then the strings: path, cwd, argv, env, make_dirs, each ending in NUL).
struct WarmGo {
  uint64_t wall_timeout_ms, kill_grace_ms;
};
struct WarmHeader {
  uint32_t magic;
  uint32_t argc, envc, ndirs;
  uint32_t fd_mask;  // bit i: descriptor i (stdin, stdout, stderr, fd3) is attached, in that order
  uint32_t reserved;
  uint64_t bytes;
};
constexpr uint32_t kWarmMagic = 0x61776d31;  // "awm1"
constexpr uint64_t kMaxCommandBytes = 64ull << 20;

ssize_t read_full(int fd, void* buf, size_t n) noexcept {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, static_cast<char*>(buf) + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(got);
}

// The init's side of start_warm: fills `c` with pointers into a mapping of its own. Returns 0,
// -1 when the parent closed without sending (the sandbox was discarded), or an errno.
int receive_command(int sock, CommandArgs& c) noexcept {
  WarmHeader h{};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  iovec iov{&h, sizeof h};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return -1;
  if (n < 0) return errno;
  int fds[4] = {-1, -1, -1, -1};
  int nfds = 0;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
      size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
        if (nfds < 4) {
          // Well above the four the command's descriptors become, so no dup2 there overwrites
          // another of them.
          fds[nfds] = ::fcntl(fd, F_DUPFD_CLOEXEC, 64);
          if (fds[nfds] < 0) return errno;
          ++nfds;
        }
        ::close(fd);
      }
    }
  if (n != static_cast<ssize_t>(sizeof h) || (msg.msg_flags & MSG_CTRUNC) || h.magic != kWarmMagic ||
      __builtin_popcount(h.fd_mask & 15) != nfds || h.bytes == 0 || h.bytes > kMaxCommandBytes ||
      h.argc == 0 || uint64_t{h.argc} + h.envc + h.ndirs + 2 > h.bytes)
    return EPROTO;
  size_t pointers = (size_t{h.argc} + 1 + h.envc + 1 + h.ndirs + 1) * sizeof(char*);
  size_t size = pointers + h.bytes;
  void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return errno;
  char** ptrs = static_cast<char**>(map);
  char* body = static_cast<char*>(map) + pointers;
  if (read_full(sock, body, h.bytes) != static_cast<ssize_t>(h.bytes)) return EPROTO;
  if (body[h.bytes - 1] != '\0') return EPROTO;
  // Split: exactly 2 + argc + envc + ndirs strings.
  char* strings[2];
  size_t want = 2 + size_t{h.argc} + h.envc + h.ndirs, at = 0, k = 0;
  char** argv = ptrs;
  char** envp = argv + h.argc + 1;
  char** dirs = envp + h.envc + 1;
  while (at < h.bytes) {
    char* str = body + at;
    if (k >= want) return EPROTO;
    if (k < 2)
      strings[k] = str;
    else if (k < 2 + size_t{h.argc})
      argv[k - 2] = str;
    else if (k < 2 + size_t{h.argc} + h.envc)
      envp[k - 2 - h.argc] = str;
    else
      dirs[k - 2 - h.argc - h.envc] = str;
    ++k;
    at += std::strlen(str) + 1;
  }
  if (k != want) return EPROTO;
  argv[h.argc] = envp[h.envc] = dirs[h.ndirs] = nullptr;
  c.path = strings[0];
  c.cwd = strings[1];
  c.argv = argv;
  c.envp = envp;
  c.make_dirs = dirs;
  int* slot[4] = {&c.stdin_fd, &c.stdout_fd, &c.stderr_fd, &c.fd3};
  for (int i = 0, next = 0; i < 4; ++i)
    if (h.fd_mask & (1u << i)) *slot[i] = fds[next++];
  return 0;
}

[[noreturn]] void report_and_exit(int fd, Step step, int err) noexcept {
  SetupFailure f{step, err};
  (void)!::write(fd, &f, sizeof f);
  ::_exit(127);
}

// The confined command: runs in the supervisor's child, ends in execve.
[[noreturn]] void run_command(const LaunchSpec& s, const CommandArgs& c, int errfd, const sigset_t& old_mask,
                              pid_t parent) noexcept {
  // A command starts with no signal blocked or ignored, whatever airlock itself blocks (the CLI
  // blocks SIGTERM for its own signal thread; an ignored signal would survive exec).
  (void)old_mask;
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) report_and_exit(errfd, Step::ParentDeath, errno);
  // The parent (which holds the wall clock) killed before the prctl: no command without it.
  if (::getppid() != parent) ::_exit(127);
  // Its own process group, so a stop or the deadline can signal the command's whole group.
  if (::setpgid(0, 0) < 0) report_and_exit(errfd, Step::NewSession, errno);
  if (c.cwd[0] && ::chdir(c.cwd) < 0) report_and_exit(errfd, Step::Chdir, errno);
  // Descriptor 3 is about to receive the passed descriptor: what the later steps still use
  // moves off it first.
  int ruleset = s.landlock_ruleset;
  if (c.fd3 >= 0 && c.fd3 != 3) {
    if (errfd == 3) {
      errfd = ::fcntl(3, F_DUPFD_CLOEXEC, 4);
      if (errfd < 0) ::_exit(127);  // no pipe left to report on; the supervisor sees no exec
    }
    if (ruleset == 3) {
      ruleset = ::fcntl(3, F_DUPFD_CLOEXEC, 4);
      if (ruleset < 0) report_and_exit(errfd, Step::Landlock, errno);
    }
  }
  if (int e = apply_fds(c.stdin_fd, c.stdout_fd, c.stderr_fd, c.fd3)) report_and_exit(errfd, Step::Fds, e);
  if (s.rlimits)
    if (int e = apply_rlimits(*s.rlimits)) report_and_exit(errfd, Step::Rlimits, e);
  if (s.drop_capabilities)
    if (int e = apply_drop_capabilities()) report_and_exit(errfd, Step::DropCapabilities, e);
  if (s.no_new_privs && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
    report_and_exit(errfd, Step::NoNewPrivs, errno);
  if (ruleset >= 0 && s.landlock_own_proc)
    if (int e = apply_landlock_read_rule(ruleset, "/proc/self")) report_and_exit(errfd, Step::Landlock, e);
  if (ruleset >= 0)
    if (int e = apply_landlock(ruleset)) report_and_exit(errfd, Step::Landlock, e);
  if (s.seccomp)
    if (int e = apply_seccomp(s.seccomp)) report_and_exit(errfd, Step::Seccomp, e);
  // After every confinement step: made by the confined process, under the jail's own rules.
  for (char* const* d = c.make_dirs; d && *d; ++d)
    if (::mkdir(*d, 0700) < 0) report_and_exit(errfd, Step::Tmpdir, errno);
  ::execve(c.path, c.argv, c.envp);
  report_and_exit(errfd, Step::Exec, errno);
}

// What the command's vfork-style child needs: descriptors to close first (ours, not its), then
// run_command's arguments.
struct CommandStart {
  const LaunchSpec* spec;
  const CommandArgs* args;
  int errfd;
  const sigset_t* old_mask;
  int close_first[3];
  pid_t parent = ::getpid();  // the supervisor or the init, whose death must end the command
};

int command_body(void* arg) noexcept {
  auto* c = static_cast<const CommandStart*>(arg);
  for (int fd : c->close_first)
    if (fd >= 0) ::close(fd);
  run_command(*c->spec, *c->args, c->errfd, *c->old_mask, c->parent);
}

struct CommandStatus {
  int32_t exited;
  int32_t code;
  int32_t signal;
  int64_t killed;  // processes the command left behind in the namespace
};

// The namespace's init: PID 1 of the new pid namespace. Builds the root, starts the command,
// forwards stop signals to it and reaps everything; when the command ends it reports the
// command's status and exits, and the kernel kills whatever is left in the namespace.
[[noreturn]] void run_init(const LaunchSpec& s, const CommandArgs& cold, int command_fd, int errfd, int gofd,
                           int statusfd, const sigset_t& old_mask) noexcept {
  char go = 0;
  ssize_t n;
  do {
    n = ::read(gofd, &go, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1) ::_exit(127);  // the supervisor could not map our ids: it reports why
  ::close(gofd);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) report_and_exit(errfd, Step::ParentDeath, errno);
  int failed_op = -1;
  if (int e = apply_mounts(*s.mounts, &failed_op)) report_and_exit(errfd, Step::Mounts, e);
  if (!s.hostname.empty() && ::sethostname(s.hostname.data(), s.hostname.size()) != 0)
    report_and_exit(errfd, Step::Hostname, errno);
  if (int e = apply_loopback_up()) report_and_exit(errfd, Step::Loopback, e);
  // The door's listener belongs to this namespace, so only the sandbox can connect to it; it
  // goes out to airlock before the command exists, and neither end stays open here.
  if (s.door_channel >= 0)
    if (int e = apply_door_listener(s.door_channel, s.door_address.c_str(), s.door_port))
      report_and_exit(errfd, Step::Door, e);
  // The fresh /proc and the new root are inodes the parent could not name: /proc is readable,
  // and every directory of the new root (which holds only what the plan bound) may be listed.
  if (s.landlock_ruleset >= 0) {
    if (int e = apply_landlock_read_rule(s.landlock_ruleset, "/proc")) report_and_exit(errfd, Step::Landlock, e);
    if (int e = apply_landlock_read_rule(s.landlock_ruleset, "/", true)) report_and_exit(errfd, Step::Landlock, e);
  }
  // A warm sandbox is built: it waits here for its one command.
  CommandArgs warm;
  const CommandArgs* args = &cold;
  if (command_fd >= 0) {
    int e = receive_command(command_fd, warm);
    if (e < 0) ::_exit(0);  // discarded unused
    if (e) report_and_exit(errfd, Step::Init, e);
    ::close(command_fd);
    SetupFailure taken{Step::None, 0};
    (void)!::write(errfd, &taken, sizeof taken);
    args = &warm;
  }
  sigset_t all;
  sigemptyset(&all);
  sigaddset(&all, SIGTERM);
  sigaddset(&all, SIGINT);
  sigaddset(&all, SIGHUP);
  sigaddset(&all, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &all, nullptr);
  int sfd = ::signalfd(-1, &all, SFD_CLOEXEC);
  if (sfd < 0) report_and_exit(errfd, Step::Init, errno);
  int cmd_pidfd = -1;
  CommandStart start{&s, args, errfd, &old_mask, {sfd, statusfd, -1}};
  pid_t cmd = clone_vfork(&cmd_pidfd, command_body, &start);
  if (cmd < 0) report_and_exit(errfd, Step::CloneCommand, errno);
  ::close(errfd);  // from here only the command holds it, until its exec succeeds
  for (;;) {
    signalfd_siginfo si{};
    ssize_t r = ::read(sfd, &si, sizeof si);
    if (r < 0 && errno == EINTR) continue;
    if (r != sizeof si) ::_exit(126);
    if (si.ssi_signo != SIGCHLD) {
      ::kill(-cmd, static_cast<int>(si.ssi_signo));
      ::kill(cmd, static_cast<int>(si.ssi_signo));
      continue;
    }
    for (;;) {
      siginfo_t info{};
      if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG) != 0 || info.si_pid == 0) break;
      if (info.si_pid != cmd) continue;  // an orphan we inherited: reaped
      CommandStatus st{info.si_code == CLD_EXITED, info.si_code == CLD_EXITED ? info.si_status : 0,
                       info.si_code == CLD_EXITED ? 0 : info.si_status, 0};
      // Everything else in the namespace goes now, counted as it is reaped.
      ::kill(-1, SIGKILL);
      for (;;) {
        siginfo_t rest{};
        if (::waitid(P_ALL, 0, &rest, WEXITED) != 0) break;
        ++st.killed;
      }
      (void)!::write(statusfd, &st, sizeof st);
      ::_exit(0);
    }
  }
}

int64_t monotonic_ms() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// Reads our own children from /proc and SIGKILLs them, until none is left to reap. Every
// descendant whose parent dies is re-parented to us (we are a child subreaper), so this
// reaches a double-forked daemon too. Returns how many it killed.
int64_t kill_all_descendants() noexcept {
  int64_t killed = 0;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/children", static_cast<int>(::getpid()));
  char buf[8192];
  for (;;) {
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? ::read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0) ::close(fd);
    if (n > 0) {
      buf[n] = '\0';
      char* p = buf;
      while (*p) {
        char* end = nullptr;
        long pid = std::strtol(p, &end, 10);
        if (end == p) break;
        if (pid > 0 && ::kill(static_cast<pid_t>(pid), SIGKILL) == 0) ++killed;
        p = end;
        while (*p == ' ' || *p == '\n') ++p;
      }
    }
    int status = 0;
    pid_t r = ::waitpid(-1, &status, 0);
    if (r < 0 && errno == ECHILD) return killed;
  }
}

// Signals the command's whole process group (everything not escaped with setsid).
void signal_group(pid_t command, int sig) noexcept {
  ::kill(-command, sig);
  ::kill(command, sig);
}

[[noreturn]] void run_supervisor(const LaunchSpec& s, const CommandArgs& args, int report_fd, int go_fd,
                                 int command_fd) noexcept {
  SupervisorReport rep{};
  auto finish = [&](Step step, int err) {
    rep.setup_failed = 1;
    rep.step = step;
    rep.err = err;
    (void)!::write(report_fd, &rep, sizeof rep);
    ::_exit(0);
  };
  // airlock's death is a signal the supervisor handles rather than dies of: dying at once would
  // hand whatever the command left behind (a double-forked daemon, re-parented to us) to init, out
  // of reach. Instead it kills the command and every descendant, then exits. Until the signal is
  // blocked below, SIGTERM still kills it outright, before the command exists.
  pid_t airlock_pid = ::getppid();
  if (::prctl(PR_SET_PDEATHSIG, SIGTERM) < 0) finish(Step::ParentDeath, errno);
  if (::getppid() != airlock_pid) ::_exit(0);  // airlock died before the prctl: nobody to report to
  // Nothing of airlock's but what this run needs: a daemon starts supervisors for many runs at
  // once, and one holding another run's pipe would keep that run's reader from its end of file.
  int keep[] = {report_fd,   s.landlock_ruleset, s.door_channel,    s.stdin_fd,        s.stdout_fd,
                s.stderr_fd, s.fd3,              s.cgroup_procs[0], s.cgroup_procs[1], s.cgroup_procs[2],
                go_fd,       command_fd};
  if (int e = close_all_but(keep, std::size(keep))) finish(Step::Fds, e);
  // Join the cgroup before the command exists, so nothing it starts escapes the count.
  for (int fd : s.cgroup_procs)
    if (fd >= 0)
      if (int e = apply_cgroup(fd)) finish(Step::JoinCgroup, e);
  // A new session: no controlling terminal (TIOCSTI has nothing to inject into), and one
  // process group to signal.
  if (::setsid() < 0) finish(Step::NewSession, errno);
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) finish(Step::Subreaper, errno);
  sigset_t mask, old_mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGHUP);
  if (::sigprocmask(SIG_BLOCK, &mask, &old_mask) < 0) finish(Step::SignalSetup, errno);
  int sfd = ::signalfd(-1, &mask, SFD_CLOEXEC);
  if (sfd < 0) finish(Step::SignalSetup, errno);
  // Nobody may read the report once airlock is gone: a write then fails instead of killing us.
  ::signal(SIGPIPE, SIG_IGN);
  int errpipe[2];
  if (::pipe2(errpipe, O_CLOEXEC) < 0) finish(Step::CloneCommand, errno);
  int64_t started = monotonic_ms();
  uint64_t wall_timeout_ms = s.wall_timeout_ms, kill_grace_ms = s.kill_grace_ms;
  // Our own limits as they are before the command exists: the report says if any moved while it
  // ran (a command that reaches them could starve the wall clock of descriptors or CPU).
  rlimit own_limits[RLIMIT_NLIMITS];
  for (int r = 0; r < RLIMIT_NLIMITS; ++r) ::getrlimit(static_cast<__rlimit_resource>(r), &own_limits[r]);

  int cmd_pidfd = -1;
  pid_t cmd;
  int statuspipe[2] = {-1, -1};
  if (s.mounts) {
    int gopipe[2];
    if (::pipe2(gopipe, O_CLOEXEC) < 0 || ::pipe2(statuspipe, O_CLOEXEC) < 0) finish(Step::Init, errno);
    // kSandboxNamespaces (apply.h) names these for the receipt.
    cmd = clone_with_pidfd(&cmd_pidfd, CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
                                           CLONE_NEWUTS | CLONE_NEWCGROUP);
    if (cmd < 0) finish(Step::CloneCommand, errno);
    if (cmd == 0) {
      ::close(errpipe[0]);
      ::close(report_fd);
      ::close(gopipe[1]);
      ::close(statuspipe[0]);
      if (go_fd >= 0) ::close(go_fd);
      run_init(s, args, command_fd, errpipe[1], gopipe[0], statuspipe[1], old_mask);
    }
    ::close(gopipe[0]);
    ::close(statuspipe[1]);
    if (s.door_channel >= 0) ::close(s.door_channel);  // the init's alone: its exit is airlock's EOF
    // Only the parent namespace may write the maps; the init waits for them on the go pipe.
    if (int e = apply_id_maps(cmd, *s.id_maps)) {
      ::kill(cmd, SIGKILL);
      ::waitid(P_PIDFD, static_cast<id_t>(cmd_pidfd), nullptr, WEXITED);
      finish(Step::IdMaps, e);
    }
    (void)!::write(gopipe[1], "g", 1);
    ::close(gopipe[1]);
    if (s.warm) {
      // Built: wait for the command's start, and time it from there. Closed unused, the sandbox
      // is discarded: nothing to report, nobody reads it.
      ::close(command_fd);
      // While it waits, the init may end: a setup step failed (its record is in the error pipe,
      // reported once the command comes, as a cold launch reports it), or something killed it
      // (no record): the sandbox is lost, reported as such, so the parent builds one on demand.
      // (An init killed after it took its command, before starting it, is reported as the
      // command killed: the safe side, never run twice.)
      auto init_lost = [&] {
        pollfd dead{cmd_pidfd, POLLIN, 0}, e{errpipe[0], POLLIN, 0};
        return ::poll(&dead, 1, 0) == 1 && !(::poll(&e, 1, 0) == 1 && (e.revents & POLLIN));
      };
      auto report_lost = [&] {
        ::waitid(P_PIDFD, static_cast<id_t>(cmd_pidfd), nullptr, WEXITED);
        rep.lost = 1;
        (void)!::write(report_fd, &rep, sizeof rep);
        ::_exit(0);
      };
      for (;;) {
        pollfd w[2] = {{go_fd, POLLIN, 0}, {cmd_pidfd, POLLIN, 0}};
        if (::poll(w, 2, -1) < 0) {
          if (errno == EINTR) continue;
          break;
        }
        if (w[0].revents) break;
        if (w[1].revents) {
          if (init_lost()) report_lost();
          pollfd go{go_fd, POLLIN, 0};
          ::poll(&go, 1, -1);
          break;
        }
      }
      WarmGo g{};
      if (read_full(go_fd, &g, sizeof g) != static_cast<ssize_t>(sizeof g)) {
        ::kill(cmd, SIGKILL);
        ::waitid(P_PIDFD, static_cast<id_t>(cmd_pidfd), nullptr, WEXITED);
        ::_exit(0);
      }
      ::close(go_fd);
      if (init_lost()) report_lost();  // it ended while the clock was on its way
      started = monotonic_ms();
      wall_timeout_ms = g.wall_timeout_ms;
      kill_grace_ms = g.kill_grace_ms;
    }
  } else {
    if (s.door_channel >= 0) ::close(s.door_channel);  // no namespace, no door
    // Built ahead without a namespace: this supervisor waits for the clock and the command itself.
    CommandArgs warm;
    const CommandArgs* command = &args;
    if (s.warm) {
      WarmGo g{};
      if (read_full(go_fd, &g, sizeof g) != static_cast<ssize_t>(sizeof g)) ::_exit(0);  // discarded
      ::close(go_fd);
      started = monotonic_ms();
      wall_timeout_ms = g.wall_timeout_ms;
      kill_grace_ms = g.kill_grace_ms;
      int e = receive_command(command_fd, warm);
      if (e < 0) ::_exit(0);
      if (e) finish(Step::CloneCommand, e);
      ::close(command_fd);
      command = &warm;
    }
    CommandStart start{&s, command, errpipe[1], &old_mask, {errpipe[0], report_fd, sfd}};
    cmd = clone_vfork(&cmd_pidfd, command_body, &start);
    if (cmd < 0) finish(Step::CloneCommand, errno);
  }
  ::close(errpipe[1]);
  // A failed step's record, or end of file once the command's exec succeeded. A waiting init
  // first writes that it took its command (step None): end of file without that means it died
  // before the command reached it, and the command never ran.
  SetupFailure f{};
  ssize_t got;
  bool taken = false;
  for (;;) {
    do {
      got = ::read(errpipe[0], &f, sizeof f);
    } while (got < 0 && errno == EINTR);
    if (got != static_cast<ssize_t>(sizeof f) || f.step != Step::None) break;
    taken = true;
  }
  ::close(errpipe[0]);
  if (got == static_cast<ssize_t>(sizeof f)) {
    kill_all_descendants();
    finish(f.step, f.err);
  }
  if (s.warm && s.mounts && !taken) {
    kill_all_descendants();
    rep.lost = 1;
    (void)!::write(report_fd, &rep, sizeof rep);
    ::_exit(0);
  }

  // Wait for the command, the deadline or a stop request, whichever comes first.
  int64_t deadline = wall_timeout_ms ? started + static_cast<int64_t>(wall_timeout_ms) : -1;
  int64_t kill_at = -1;
  bool terminating = false, orphaned = false;
  siginfo_t info{};
  for (;;) {
    pollfd fds[2] = {{cmd_pidfd, POLLIN, 0}, {sfd, POLLIN, 0}};
    int64_t now = monotonic_ms();
    int64_t next = terminating ? kill_at : deadline;
    int timeout = next < 0 ? -1 : static_cast<int>(next > now ? next - now : 0);
    int r = ::poll(fds, 2, timeout);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      // poll itself failed (EINVAL once RLIMIT_NOFILE is below 2): the wall clock must bind all
      // the same, so look for the command's end without it, a few milliseconds at a time.
      info = {};
      if (::waitid(P_PIDFD, static_cast<id_t>(cmd_pidfd), &info, WEXITED | WNOHANG) == 0 && info.si_pid != 0) break;
      timespec nap{0, 20 * 1000 * 1000};
      ::nanosleep(&nap, nullptr);
    }
    if (r > 0 && (fds[0].revents & POLLIN)) {
      if (::waitid(P_PIDFD, static_cast<id_t>(cmd_pidfd), &info, WEXITED) == 0) break;
      if (errno == EINTR) continue;
      break;
    }
    if (r > 0 && (fds[1].revents & POLLIN)) {
      signalfd_siginfo si{};
      (void)!::read(sfd, &si, sizeof si);
      rep.stopped = 1;
      if (::getppid() != airlock_pid && !orphaned) {
        // airlock is gone (our parent-death signal): no grace, everything dies now.
        orphaned = true;
        terminating = true;
        signal_group(cmd, SIGKILL);
        kill_at = monotonic_ms() + 1000;
        continue;
      }
    }
    bool deadline_passed = deadline >= 0 && monotonic_ms() >= deadline;
    if (!terminating && (rep.stopped || deadline_passed)) {
      if (deadline_passed && !rep.stopped) rep.timed_out = 1;
      terminating = true;
      signal_group(cmd, SIGTERM);
      kill_at = monotonic_ms() + static_cast<int64_t>(kill_grace_ms);
      continue;
    }
    if (terminating && monotonic_ms() >= kill_at) {
      signal_group(cmd, SIGKILL);
      kill_at = monotonic_ms() + 1000;
    }
  }
  CommandStatus inner{};
  if (s.mounts && ::read(statuspipe[0], &inner, sizeof inner) == static_cast<ssize_t>(sizeof inner)) {
    // The init reported the command's own status.
    rep.exited = inner.exited;
    rep.exit_code = inner.code;
    rep.signal = inner.signal;
    rep.descendants_killed = inner.killed;
  } else if (info.si_code == CLD_EXITED) {
    rep.exited = 1;
    rep.exit_code = info.si_status;
  } else {
    rep.signal = info.si_status;
  }
  rep.descendants_killed += kill_all_descendants();
  for (int r = 0; r < RLIMIT_NLIMITS; ++r) {
    rlimit now{};
    ::getrlimit(static_cast<__rlimit_resource>(r), &now);
    if (now.rlim_cur != own_limits[r].rlim_cur || now.rlim_max != own_limits[r].rlim_max)
      rep.supervisor_limits_changed |= 1u << r;
  }
  rusage ru{};
  ::getrusage(RUSAGE_CHILDREN, &ru);
  rep.user_us = ru.ru_utime.tv_sec * 1000000LL + ru.ru_utime.tv_usec;
  rep.system_us = ru.ru_stime.tv_sec * 1000000LL + ru.ru_stime.tv_usec;
  rep.max_rss_kb = ru.ru_maxrss;
  (void)!::write(report_fd, &rep, sizeof rep);
  ::_exit(0);
}

// A C string ends at its first NUL: an argument holding one would run cut short, unlike what the
// receipt records. Refused on every path to exec.
Result<void> check_command_strings(const LaunchSpec& spec) {
  auto has_nul = [](const std::string& v) { return v.find('\0') != std::string::npos; };
  if (has_nul(spec.path) || has_nul(spec.cwd)) return fail(Code::PolicyInvalid, "a NUL byte in the command's path or cwd");
  for (const auto* list : {&spec.argv, &spec.env, &spec.make_dirs})
    if (std::any_of(list->begin(), list->end(), has_nul))
      return fail(Code::PolicyInvalid, "a NUL byte in the command's arguments or environment");
  return {};
}

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

Result<Launched> launch(const LaunchSpec& spec) {
  if (!spec.warm) TRY(check_command_strings(spec));
  std::vector<char*> argv = c_strings(spec.argv);
  std::vector<char*> envp = c_strings(spec.env);
  std::vector<char*> dirs = c_strings(spec.make_dirs);
  CommandArgs args{spec.path.c_str(), argv.data(), envp.data(), spec.cwd.c_str(), dirs.data(),
                   spec.stdin_fd,     spec.stdout_fd, spec.stderr_fd, spec.fd3};
  int rp[2];
  if (::pipe2(rp, O_CLOEXEC) < 0) return fail_errno(Code::ExecutorUnavailable, "pipe2", errno);
  UniqueFd report_read(rp[0]), report_write(rp[1]);
  // A warm sandbox's two channels: sockets, so a write to a sandbox that is gone fails with
  // EPIPE (MSG_NOSIGNAL) instead of raising SIGPIPE in airlock.
  UniqueFd go_ours, go_theirs, command_ours, command_theirs;
  if (spec.warm) {
    int a[2], b[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, a) < 0)
      return fail_errno(Code::ExecutorUnavailable, "socketpair", errno);
    go_ours.reset(a[0]);
    go_theirs.reset(a[1]);
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, b) < 0)
      return fail_errno(Code::ExecutorUnavailable, "socketpair", errno);
    command_ours.reset(b[0]);
    command_theirs.reset(b[1]);
  }
  int pidfd = -1;
  pid_t pid = clone_with_pidfd(&pidfd);
  if (pid < 0) return fail_errno(Code::ExecutorUnavailable, "clone3", errno);
  if (pid == 0) {
    ::close(rp[0]);
    run_supervisor(spec, args, rp[1], go_theirs.get(), command_theirs.get());
  }
  report_write.reset();
  return Launched{ChildProcess(pid, UniqueFd(pidfd)), std::move(report_read), std::move(go_ours),
                  std::move(command_ours)};
}

namespace {

Result<void> send_all(int fd, const void* data, size_t n) {
  size_t sent = 0;
  while (sent < n) {
    ssize_t r = ::send(fd, static_cast<const char*>(data) + sent, n - sent, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return fail_errno(Code::ExecutorUnavailable, "send to the sandbox built ahead", errno);
    sent += static_cast<size_t>(r);
  }
  return {};
}

}  // namespace

Result<void> start_warm(Launched& l, const LaunchSpec& spec) {
  if (!l.go || !l.command) return fail(Code::InternalError, "start_warm on a sandbox that was not built ahead");
  if (spec.argv.empty()) return fail(Code::PolicyInvalid, "no command to run");
  std::string body;
  auto put = [&](const std::string& v) {
    body += v;
    body += '\0';
  };
  TRY(check_command_strings(spec));
  put(spec.path);
  put(spec.cwd);
  for (const auto* list : {&spec.argv, &spec.env, &spec.make_dirs})
    for (const auto& v : *list) put(v);
  if (body.size() > kMaxCommandBytes) return fail(Code::PolicyInvalid, "the command and its environment are too large");
  WarmHeader h{kWarmMagic, static_cast<uint32_t>(spec.argv.size()), static_cast<uint32_t>(spec.env.size()),
               static_cast<uint32_t>(spec.make_dirs.size()), 0, 0, body.size()};
  int fds[4], nfds = 0;
  const int wanted[4] = {spec.stdin_fd, spec.stdout_fd, spec.stderr_fd, spec.fd3};
  for (int i = 0; i < 4; ++i)
    if (wanted[i] >= 0) {
      h.fd_mask |= 1u << i;
      fds[nfds++] = wanted[i];
    }
  // The wall clock first; then the command. A supervisor that is gone fails the first send.
  WarmGo g{spec.wall_timeout_ms, spec.kill_grace_ms};
  auto lost = [&](const Error& e) -> Result<void> {
    (void)l.supervisor.signal(SIGKILL);
    return fail(Code::ExecutorUnavailable, "the sandbox built ahead was lost before its command: " + e.message);
  };
  if (auto r = send_all(l.go.get(), &g, sizeof g); !r) return lost(r.error());
  l.go.reset();
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  iovec iov{&h, sizeof h};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (nfds) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
  }
  ssize_t n;
  do {
    n = ::sendmsg(l.command.get(), &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  // A receiver that is gone (EPIPE): an init that failed a setup step (its supervisor reports
  // which) or died waiting (reported lost); on the Landlock tier the supervisor itself, and the
  // run then ends without a report. Anything else
  // leaves the init waiting for the rest, so the sandbox is ended here.
  if (n < 0 && errno != EPIPE && errno != ECONNRESET) return lost(fail_errno(Code::ExecutorUnavailable, "sendmsg", errno).error());
  if (n >= 0 && n != static_cast<ssize_t>(sizeof h)) return lost(Error{Code::ExecutorUnavailable, "a short send", {}});
  if (n >= 0)
    if (auto r = send_all(l.command.get(), body.data(), body.size());
        !r && r.error().facts.value("errno", 0) != EPIPE && r.error().facts.value("errno", 0) != ECONNRESET)
      return lost(r.error());
  l.command.reset();
  return {};
}

bool waiting(const Launched& l) {
  if (!l.go || !l.supervisor.running()) return false;
  pollfd p{l.supervisor.pidfd(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

Result<SupervisorReport> wait_report(Launched& l) {
  SupervisorReport rep{};
  ssize_t n;
  do {
    n = ::read(l.report.get(), &rep, sizeof rep);
  } while (n < 0 && errno == EINTR);
  auto st = TRY(l.supervisor.wait());
  if (n != static_cast<ssize_t>(sizeof rep))
    return fail(Code::ExecutorUnavailable,
                fmt::format("the supervisor ended without a report ({})",
                            st.signaled ? fmt::format("signal {}", st.signal) : fmt::format("exit {}", st.code)));
  return rep;
}

Result<void> stop(const Launched& l) { return l.supervisor.signal(SIGTERM); }

}  // namespace airlock::linux
