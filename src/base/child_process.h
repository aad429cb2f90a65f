// ChildProcess: a started child held by pidfd; destruction kills and reaps it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "base/unique_fd.h"

namespace airlock {

// How a child ended, as waitid() reported it.
struct ExitStatus {
  bool signaled = false;
  int code = 0;    // exit code when !signaled
  int signal = 0;  // terminating signal when signaled
  // The shell convention: the exit code, or 128 + signal.
  int shell_status() const { return signaled ? 128 + signal : code; }
};

class ChildProcess {
 public:
  ChildProcess() = default;
  // Takes ownership of a child: pid and a pidfd referring to it.
  ChildProcess(pid_t pid, UniqueFd pidfd) : pid_(pid), pidfd_(std::move(pidfd)) {}
  ChildProcess(ChildProcess&&) noexcept = default;
  ChildProcess& operator=(ChildProcess&& o) noexcept;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_.get(); }
  bool running() const { return pid_ > 0 && !status_; }

  // Sends a signal through the pidfd (never to a recycled pid).
  Result<void> signal(int sig) const;
  // Waits up to `timeout` (forever when nullopt); nullopt result means still running.
  Result<std::optional<ExitStatus>> wait_for(std::optional<std::chrono::milliseconds> timeout);
  Result<ExitStatus> wait() {
    auto r = TRY(wait_for(std::nullopt));
    return *r;
  }
  const std::optional<ExitStatus>& status() const { return status_; }

 private:
  void kill_and_reap() noexcept;
  pid_t pid_ = -1;
  UniqueFd pidfd_;
  std::optional<ExitStatus> status_;
};

// pidfd_open(2), wrapped.
Result<UniqueFd> open_pidfd(pid_t pid);

// /proc/PID/stat as far as identity goes: field 22 (start time in clock ticks since boot; with
// the pid, a process's identity, as a pid alone may be reused) and whether it is a zombie. None
// when it cannot be read: the process is gone (also while being read), or the read failed (no
// descriptors left), or the file is not what the kernel writes. Never throws.
struct ProcessStat {
  int64_t start_time = 0;
  bool zombie = false;
};
std::optional<ProcessStat> process_stat(pid_t pid);
// The start time of a process that runs (not a zombie); none otherwise.
std::optional<int64_t> process_start_time(pid_t pid);
// Whether the process `pid` that started at `start_time` still runs: false when it is gone, a
// zombie or the pid was reused; none when that cannot be told (the pid exists, its stat could
// not be read). Callers that would destroy something on "gone" treat none as alive.
std::optional<bool> same_process(pid_t pid, int64_t start_time);

// Runs argv (searched on PATH) in `cwd` to its end: stdin /dev/null, stdout and stderr appended to
// `log` (-1: nowhere) and each line handed to `line` (may be empty). Any end but exit 0 is
// AIRLOCK_EXECUTOR_UNAVAILABLE naming the program and how it ended.
Result<void> run_step(const std::vector<std::string>& argv, const std::string& cwd, int log,
                      const std::function<void(std::string_view)>& line);

}  // namespace airlock
