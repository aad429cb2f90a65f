// The stdin line reader: poll on stdin and a signalfd, lines into an Inbox.
#include "cli/line_reader.h"

#include <poll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "base/unique_fd.h"

namespace airlock::cli {

void Inbox::push(std::string line) {
  std::lock_guard lk(mu_);
  lines_.push_back(std::move(line));
  cv_.notify_one();
}

void Inbox::close() {
  std::lock_guard lk(mu_);
  closed_ = true;
  cv_.notify_one();
}

std::optional<std::string> Inbox::pop() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return !lines_.empty() || closed_; });
  if (lines_.empty()) return std::nullopt;
  std::string l = std::move(lines_.front());
  lines_.pop_front();
  return l;
}

std::thread start_line_reader(Inbox& inbox, const sigset_t& mask, std::function<void(const std::string&)> on_line,
                              std::function<bool(int)> on_signal) {
  auto sigfd = std::make_shared<UniqueFd>(::signalfd(-1, &mask, SFD_CLOEXEC));
  return std::thread([&inbox, sigfd, on_line = std::move(on_line), on_signal = std::move(on_signal)] {
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {sigfd->get(), POLLIN, 0}};
    std::string buf;
    bool skipping = false;  // the rest of an overlong line, up to its newline, is dropped
    char chunk[65536];
    for (;;) {
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (fds[1].revents & POLLIN) {
        signalfd_siginfo si{};
        if (::read(sigfd->get(), &si, sizeof si) != static_cast<ssize_t>(sizeof si)) continue;
        if (on_signal(static_cast<int>(si.ssi_signo))) break;
        continue;
      }
      if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      buf.append(chunk, static_cast<size_t>(n));
      size_t nl;
      while ((nl = buf.find('\n')) != std::string::npos) {
        std::string line = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        if (skipping) {
          skipping = false;
          continue;
        }
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        on_line(line);
        inbox.push(std::move(line));
      }
      if (skipping) {
        buf.clear();
      } else if (buf.size() > kMaxLineBytes) {
        // A line longer than any request may be is bounded here, not buffered to its end: its
        // first kMaxLineBytes + 1 bytes go on, for the parser to refuse by their size.
        buf.resize(kMaxLineBytes + 1);
        on_line(buf);
        inbox.push(std::move(buf));
        buf.clear();
        skipping = true;
      }
    }
    inbox.close();
  });
}

void emit_line(const Json& j) {
  std::string line = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

}  // namespace airlock::cli
