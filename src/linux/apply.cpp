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
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "linux/cgroup.h"
#include "linux/fds.h"
#include "linux/landlock.h"
#include "linux/seccomp.h"

namespace airlock::linux {

std::string_view to_string(Step s) {
  switch (s) {
    case Step::None: return "none";
    case Step::ParentDeath: return "parent_death_signal";
    case Step::JoinCgroup: return "join_cgroup";
    case Step::NewSession: return "new_session";
    case Step::Subreaper: return "subreaper";
    case Step::SignalSetup: return "signal_setup";
    case Step::CloneCommand: return "clone_command";
    case Step::Chdir: return "chdir";
    case Step::Fds: return "fds";
    case Step::Rlimits: return "rlimits";
    case Step::NoNewPrivs: return "no_new_privs";
    case Step::Landlock: return "landlock";
    case Step::Seccomp: return "seccomp";
    case Step::Exec: return "exec";
  }
  return "?";
}

namespace {

struct SetupFailure {
  Step step;
  int32_t err;
};

// fork-like clone3 returning a pidfd. Raw, so no atfork handlers or libc locks run in the child.
pid_t clone_with_pidfd(int* pidfd) noexcept {
  clone_args args{};
  args.flags = CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(pidfd);
  args.exit_signal = SIGCHLD;
  return static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
}

[[noreturn]] void report_and_exit(int fd, Step step, int err) noexcept {
  SetupFailure f{step, err};
  (void)!::write(fd, &f, sizeof f);
  ::_exit(127);
}

// The confined command: runs in the supervisor's child, ends in execve.
[[noreturn]] void run_command(const LaunchSpec& s, char* const* argv, char* const* envp, int errfd,
                              const sigset_t& old_mask) noexcept {
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) report_and_exit(errfd, Step::ParentDeath, errno);
  // Its own process group, so a stop or the deadline can signal the command's whole group.
  if (::setpgid(0, 0) < 0) report_and_exit(errfd, Step::NewSession, errno);
  if (!s.cwd.empty() && ::chdir(s.cwd.c_str()) < 0) report_and_exit(errfd, Step::Chdir, errno);
  if (int e = apply_fds(s.stdin_fd, s.stdout_fd, s.stderr_fd)) report_and_exit(errfd, Step::Fds, e);
  if (s.rlimits)
    if (int e = apply_rlimits(*s.rlimits)) report_and_exit(errfd, Step::Rlimits, e);
  if (s.no_new_privs && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
    report_and_exit(errfd, Step::NoNewPrivs, errno);
  if (s.landlock_ruleset >= 0)
    if (int e = apply_landlock(s.landlock_ruleset)) report_and_exit(errfd, Step::Landlock, e);
  if (s.seccomp)
    if (int e = apply_seccomp(s.seccomp)) report_and_exit(errfd, Step::Seccomp, e);
  ::execve(s.path.c_str(), argv, envp);
  report_and_exit(errfd, Step::Exec, errno);
}

int64_t now_ms() noexcept {
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

[[noreturn]] void run_supervisor(const LaunchSpec& s, char* const* argv, char* const* envp,
                                 int report_fd) noexcept {
  SupervisorReport rep{};
  auto finish = [&](Step step, int err) {
    rep.setup_failed = 1;
    rep.step = step;
    rep.err = err;
    (void)!::write(report_fd, &rep, sizeof rep);
    ::_exit(0);
  };
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) finish(Step::ParentDeath, errno);
  // Join the cgroup before the command exists, so nothing it starts escapes the count.
  if (s.cgroup_procs >= 0)
    if (int e = apply_cgroup(s.cgroup_procs)) finish(Step::JoinCgroup, e);
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
  int errpipe[2];
  if (::pipe2(errpipe, O_CLOEXEC) < 0) finish(Step::CloneCommand, errno);
  int64_t started = now_ms();

  int cmd_pidfd = -1;
  pid_t cmd = clone_with_pidfd(&cmd_pidfd);
  if (cmd < 0) finish(Step::CloneCommand, errno);
  if (cmd == 0) {
    ::close(errpipe[0]);
    ::close(report_fd);
    run_command(s, argv, envp, errpipe[1], old_mask);
  }
  ::close(errpipe[1]);
  SetupFailure f{};
  ssize_t got;
  do {
    got = ::read(errpipe[0], &f, sizeof f);
  } while (got < 0 && errno == EINTR);
  ::close(errpipe[0]);
  if (got == static_cast<ssize_t>(sizeof f)) {
    kill_all_descendants();
    finish(f.step, f.err);
  }

  // Wait for the command, the deadline or a stop request, whichever comes first.
  int64_t deadline = s.wall_timeout_ms ? started + static_cast<int64_t>(s.wall_timeout_ms) : -1;
  int64_t kill_at = -1;
  bool terminating = false;
  siginfo_t info{};
  for (;;) {
    pollfd fds[2] = {{cmd_pidfd, POLLIN, 0}, {sfd, POLLIN, 0}};
    int64_t now = now_ms();
    int64_t next = terminating ? kill_at : deadline;
    int timeout = next < 0 ? -1 : static_cast<int>(next > now ? next - now : 0);
    int r = ::poll(fds, 2, timeout);
    if (r < 0 && errno == EINTR) continue;
    if (r > 0 && (fds[0].revents & POLLIN)) {
      if (::waitid(P_PIDFD, static_cast<id_t>(cmd_pidfd), &info, WEXITED) == 0) break;
      if (errno == EINTR) continue;
      break;
    }
    if (r > 0 && (fds[1].revents & POLLIN)) {
      signalfd_siginfo si{};
      (void)!::read(sfd, &si, sizeof si);
      rep.stopped = 1;
    }
    bool deadline_passed = deadline >= 0 && now_ms() >= deadline;
    if (!terminating && (rep.stopped || deadline_passed)) {
      if (deadline_passed && !rep.stopped) rep.timed_out = 1;
      terminating = true;
      signal_group(cmd, SIGTERM);
      kill_at = now_ms() + static_cast<int64_t>(s.kill_grace_ms);
      continue;
    }
    if (terminating && now_ms() >= kill_at) {
      signal_group(cmd, SIGKILL);
      kill_at = now_ms() + 1000;
    }
  }
  if (info.si_code == CLD_EXITED) {
    rep.exited = 1;
    rep.exit_code = info.si_status;
  } else {
    rep.signal = info.si_status;
  }
  rep.descendants_killed = kill_all_descendants();
  rusage ru{};
  ::getrusage(RUSAGE_CHILDREN, &ru);
  rep.user_us = ru.ru_utime.tv_sec * 1000000LL + ru.ru_utime.tv_usec;
  rep.system_us = ru.ru_stime.tv_sec * 1000000LL + ru.ru_stime.tv_usec;
  rep.max_rss_kb = ru.ru_maxrss;
  (void)!::write(report_fd, &rep, sizeof rep);
  ::_exit(0);
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
  std::vector<char*> argv = c_strings(spec.argv);
  std::vector<char*> envp = c_strings(spec.env);
  int rp[2];
  if (::pipe2(rp, O_CLOEXEC) < 0) return fail_errno(Code::ExecutorUnavailable, "pipe2", errno);
  UniqueFd report_read(rp[0]), report_write(rp[1]);
  int pidfd = -1;
  pid_t pid = clone_with_pidfd(&pidfd);
  if (pid < 0) return fail_errno(Code::ExecutorUnavailable, "clone3", errno);
  if (pid == 0) {
    ::close(rp[0]);
    run_supervisor(spec, argv.data(), envp.data(), rp[1]);
  }
  report_write.reset();
  return Launched{ChildProcess(pid, UniqueFd(pidfd)), std::move(report_read)};
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
