// ChildProcess: signal, wait and kill-on-destruction through a pidfd.
#include "base/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <string>
#include <string_view>

#include "base/fs.h"

extern char** environ;

namespace airlock {

Result<UniqueFd> open_pidfd(pid_t pid) {
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return fail_errno(Code::IoError, fmt::format("pidfd_open({})", pid), errno);
  return UniqueFd(fd);
}

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    kill_and_reap();
    pid_ = std::exchange(o.pid_, -1);
    pidfd_ = std::move(o.pidfd_);
    status_ = std::move(o.status_);
    o.status_.reset();
  }
  return *this;
}

ChildProcess::~ChildProcess() { kill_and_reap(); }

void ChildProcess::kill_and_reap() noexcept {
  if (pid_ <= 0 || status_) return;
  if (pidfd_) ::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
  siginfo_t info{};
  while (::waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &info, WEXITED) < 0 && errno == EINTR) {
  }
  status_ = ExitStatus{};
}

Result<void> ChildProcess::signal(int sig) const {
  if (status_) return {};
  if (::syscall(SYS_pidfd_send_signal, pidfd_.get(), sig, nullptr, 0) < 0 && errno != ESRCH)
    return fail_errno(Code::IoError, "pidfd_send_signal", errno);
  return {};
}

Result<std::optional<ExitStatus>> ChildProcess::wait_for(
    std::optional<std::chrono::milliseconds> timeout) {
  if (status_) return status_;
  if (timeout) {
    pollfd p{pidfd_.get(), POLLIN, 0};
    int r;
    do {
      r = ::poll(&p, 1, static_cast<int>(timeout->count()));
    } while (r < 0 && errno == EINTR);
    if (r < 0) return fail_errno(Code::IoError, "poll(pidfd)", errno);
    if (r == 0) return std::optional<ExitStatus>{};
  }
  siginfo_t info{};
  int r;
  do {
    r = ::waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &info, WEXITED);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return fail_errno(Code::IoError, "waitid(pidfd)", errno);
  ExitStatus st;
  if (info.si_code == CLD_EXITED) {
    st.code = info.si_status;
  } else {
    st.signaled = true;
    st.signal = info.si_status;
  }
  status_ = st;
  return status_;
}

std::optional<ProcessStat> process_stat(pid_t pid) {
  auto text = read_file(fmt::format("/proc/{}/stat", pid));
  if (!text) return std::nullopt;
  // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
  auto close = text->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::string_view rest = std::string_view(*text).substr(close + 1);
  ProcessStat out;
  for (int field = 3; field <= 22; ++field) {
    size_t b = rest.find_first_not_of(' ');
    if (b == std::string_view::npos) return std::nullopt;
    rest.remove_prefix(b);
    size_t e = std::min(rest.find(' '), rest.size());
    std::string_view value = rest.substr(0, e);
    if (field == 3) out.zombie = value == "Z" || value == "X";
    if (field == 22) {
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out.start_time);
      if (ec != std::errc{} || end != value.data() + value.size()) return std::nullopt;
    }
    rest.remove_prefix(e);
  }
  return out;
}

std::optional<int64_t> process_start_time(pid_t pid) {
  auto st = process_stat(pid);
  if (!st || st->zombie) return std::nullopt;
  return st->start_time;
}

std::optional<bool> same_process(pid_t pid, int64_t start_time) {
  if (auto st = process_stat(pid)) return !st->zombie && st->start_time == start_time;
  if (::kill(pid, 0) < 0 && errno == ESRCH) return false;
  return std::nullopt;
}

Result<void> run_step(const std::vector<std::string>& argv, const std::string& cwd, int log,
                      const std::function<void(std::string_view)>& line) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) < 0) return fail_errno(Code::ExecutorUnavailable, "pipe", errno);
  UniqueFd rd(p[0]), wr(p[1]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, wr.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, wr.get(), 2);
  posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  wr.reset();
  if (rc != 0) return fail_errno(Code::IoError, "cannot start " + argv[0], rc);
  std::string pending;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(rd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (log >= 0) (void)write_all(log, std::string_view(buf, n), Code::IoError, "a step's log");
    pending.append(buf, n);
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      if (line) line(std::string_view(pending).substr(0, nl));
      pending.erase(0, nl + 1);
    }
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    return fail(Code::ExecutorUnavailable,
                std::string(argv[0]) + (WIFEXITED(st) ? " exited " + std::to_string(WEXITSTATUS(st)) : " was killed by signal " + std::to_string(WTERMSIG(st))),
                {{"step", argv}});
  return {};
}

}  // namespace airlock
