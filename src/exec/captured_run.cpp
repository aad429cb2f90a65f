// run_captured: stdin from a sealed memfd, stdout and stderr through pipes read by one poll loop
// while another thread waits in Executor::run.
#include "exec/captured_run.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <optional>
#include <thread>

#include "base/fs.h"
#include "base/unique_fd.h"

namespace airlock::exec {
namespace {

// stdin is a memfd holding the whole input, not a pipe: the executor's supervisor inherits
// every descriptor of ours, so a pipe's write end would live on in it and the command would
// never see end of file. A memfd has no writer to wait for, and any size fits.
Result<UniqueFd> stdin_memfd(std::string_view data) {
  UniqueFd fd(::memfd_create("airlock-stdin", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return fail_errno(Code::ExecutorUnavailable, "memfd_create for the command's stdin", errno);
  TRY(write_all(fd.get(), data, Code::ExecutorUnavailable, "write the command's stdin"));
  // Sealed, so the command reads exactly what was given.
  (void)::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
  if (::lseek(fd.get(), 0, SEEK_SET) < 0) return fail_errno(Code::ExecutorUnavailable, "lseek stdin", errno);
  return fd;
}

struct Pipe {
  UniqueFd read, write;
};

Result<Pipe> make_pipe() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) < 0) return fail_errno(Code::ExecutorUnavailable, "pipe2", errno);
  Pipe out{UniqueFd(p[0]), UniqueFd(p[1])};
  if (::fcntl(out.read.get(), F_SETFL, O_NONBLOCK) < 0)
    return fail_errno(Code::ExecutorUnavailable, "fcntl O_NONBLOCK", errno);
  return out;
}

// Reads what `fd` has now. Returns false at end of file.
bool read_some(int fd, std::string& sink, size_t& total) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      sink.append(buf, static_cast<size_t>(n));
      total += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0;  // EAGAIN: open, nothing now; 0: end of file
  }
}

}  // namespace

Result<CapturedRun> run_captured(Executor& executor, const Command& cmd, std::string_view stdin_data,
                                 size_t max_output) {
  UniqueFd in = TRY(stdin_memfd(stdin_data));
  Pipe out = TRY(make_pipe());
  Pipe err = TRY(make_pipe());
  UniqueFd done(::eventfd(0, EFD_CLOEXEC));
  if (!done) return fail_errno(Code::ExecutorUnavailable, "eventfd", errno);

  Command c = cmd;
  c.stdin_fd = in.get();
  c.stdout_fd = out.write.get();
  c.stderr_fd = err.write.get();
  std::optional<Result<RunOutcome>> result;
  std::thread runner([&] {
    result = executor.run(c);
    uint64_t one = 1;
    (void)!::write(done.get(), &one, sizeof one);
  });

  CapturedRun cap;
  std::string out_buf, err_buf;
  size_t total = 0;
  bool out_open = true, err_open = true, finished = false;
  // Keeps the captured output within the limit; past it, stops the run once and drops the rest.
  auto account = [&] {
    if (!cap.output_limited && total > max_output) {
      cap.output_limited = true;
      executor.stop_run();
    }
    if (cap.output_limited) {
      if (cap.out.size() < max_output) cap.out.append(out_buf, 0, max_output - cap.out.size());
    } else {
      cap.out += out_buf;
    }
    cap.err_tail += err_buf;
    if (cap.err_tail.size() > 2 * kStderrTailBytes) cap.err_tail.erase(0, cap.err_tail.size() - kStderrTailBytes);
    out_buf.clear();
    err_buf.clear();
  };
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (out_open || err_open) {
    pollfd fds[3] = {{out_open ? out.read.get() : -1, POLLIN, 0},
                     {err_open ? err.read.get() : -1, POLLIN, 0},
                     {finished ? -1 : done.get(), POLLIN, 0}};
    int timeout = -1;
    if (finished) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      timeout = static_cast<int>(left.count());
    }
    int r = ::poll(fds, 3, timeout);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    if (out_open && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) out_open = read_some(out.read.get(), out_buf, total);
    if (err_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) err_open = read_some(err.read.get(), err_buf, total);
    account();
    if (!finished && (fds[2].revents & POLLIN)) {
      // The run is over and every process of it is gone: our write ends are the last ones, so
      // closing them brings end of file once the pipes are drained. The deadline only guards
      // against a copy some other thread's child still holds for a moment.
      finished = true;
      out.write.reset();
      err.write.reset();
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    }
  }
  if (!finished) {
    // poll itself failed: the run must not outlive us.
    executor.stop_run();
  }
  runner.join();
  if (!*result) return std::unexpected(std::move(*result).error());
  cap.outcome = std::move(**result);
  if (cap.err_tail.size() > kStderrTailBytes) cap.err_tail.erase(0, cap.err_tail.size() - kStderrTailBytes);
  return cap;
}

}  // namespace airlock::exec
