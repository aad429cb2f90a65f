// tty: the modes of a terminal the command is given, saved before it runs and put back after.
#pragma once

#include <termios.h>

#include <array>

namespace airlock::linux {

// What a command may leave changed on a terminal it inherits (echo off, raw mode, ...), whatever
// way it ends. Owns no descriptor: the caller keeps the descriptors open until release().
class TerminalModes {
 public:
  // Saves the modes of each of `fds` that is a terminal (-1 and non-terminals are skipped).
  static TerminalModes prepare(std::array<int, 3> fds);
  // Puts the saved modes back. Idempotent.
  void release() noexcept;
  ~TerminalModes() { release(); }
  TerminalModes(TerminalModes&& o) noexcept : saved_(o.saved_) { o.saved_ = {}; }
  TerminalModes& operator=(TerminalModes&&) = delete;
  TerminalModes(const TerminalModes&) = delete;

 private:
  TerminalModes() = default;
  struct Saved {
    int fd = -1;
    termios modes{};
  };
  std::array<Saved, 3> saved_{};
};

}  // namespace airlock::linux
