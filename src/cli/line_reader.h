// Lines from stdin on their own thread, for verbs that must act on a signal while an action runs.
#pragma once

#include <signal.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "base/json_util.h"

namespace airlock::cli {

// Lines handed from the reader thread to the main thread, in order.
class Inbox {
 public:
  void push(std::string line);
  void close();
  // Blocks until a line or the end (nullopt: end of input or a stop signal).
  std::optional<std::string> pop();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> lines_;
  bool closed_ = false;
};

// The longest line read whole: a longer one is cut to kMaxLineBytes + 1 bytes (which
// parse_json refuses by size) and the rest of it, to its newline, is dropped.
inline constexpr size_t kMaxLineBytes = kMaxJsonBytes;

// Reads stdin until end of input or a signal in `mask` (blocked by block_stop_signals):
// each non-blank line goes to `on_line` (on the reader thread, so it can act at once, e.g. on
// a kill) and then to the inbox; a signal calls `on_signal` with its number, which says
// whether reading ends there (true) or goes on (a signal that asked for nothing). Either end
// closes the inbox.
std::thread start_line_reader(Inbox& inbox, const sigset_t& mask, std::function<void(const std::string&)> on_line,
                              std::function<bool(int)> on_signal);

// Writes one JSON value as one line on stdout and flushes (invalid UTF-8 replaced, never thrown).
void emit_line(const Json& j);

}  // namespace airlock::cli
