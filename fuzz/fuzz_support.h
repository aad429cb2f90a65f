// What the fuzz targets share: a scratch directory, a check that aborts with a message, and a
// broker session (host executor, development profile) over a small workspace.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "base/fs.h"
#include "base/json_util.h"

namespace airlock::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A property that must hold for every input: a broken one is a crash libFuzzer keeps.
#define FUZZ_CHECK(cond, what)                                           \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::fprintf(stderr, "fuzz check failed: %s (%s)\n", what, #cond); \
      std::abort();                                                      \
    }                                                                    \
  } while (0)

// Calls `each` with the input's first 16 lines: a session target reads a stream of requests.
template <class F>
void for_each_line(std::string_view text, F&& each) {
  size_t pos = 0;
  for (int n = 0; pos <= text.size() && n < 16; ++n) {
    size_t nl = text.find('\n', pos);
    each(text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos));
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
  }
}

// A directory made once per process beneath TMPDIR; libFuzzer runs one process per target. It is
// removed when the process exits normally (the run's time is up), so a fuzz run leaves nothing.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    // On tmpfs when there is one: a target that writes a file per input must not wait on a busy
    // disk (a CI machine's unlink once stalled past the per-input timeout).
    std::error_code ec;
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0
                                           ? std::filesystem::path("/dev/shm")
                                           : std::filesystem::temp_directory_path();
    std::string templ = (base / "airlock-fuzz-XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) std::abort();
    return templ;
  }();
  static const bool removed_at_exit = [] { return std::atexit([] { (void)remove_tree(scratch_dir()); }) == 0; }();
  (void)removed_at_exit;
  return dir;
}

// A value built from untrusted input must always serialise once repaired, and the repair must be
// the only thing needed: canonical_json is strict and throws otherwise.
inline void check_serialisable(Json j) {
  (void)repair_utf8(j);
  (void)canonical_json(j);
}

}  // namespace airlock::fuzz
