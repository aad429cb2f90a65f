// ChildProcess: signal, wait and kill-on-destruction through a pidfd.
#include "base/child_process.h"

#include <poll.h>
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

}  // namespace airlock
