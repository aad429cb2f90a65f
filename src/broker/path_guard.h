// PathGuard: every file action of the broker, checked and performed on one descriptor.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "base/unique_fd.h"
#include "policy/protected_paths.h"

namespace airlock::broker {

enum class Access { Read, Write };

struct DirEntry {
  std::string name;
  std::string type;  // "file", "dir", "symlink", "other"
  uint64_t size = 0;
};

struct Listing {
  std::vector<DirEntry> entries;
  bool truncated = false;
};

struct FileRead {
  std::string data;
  uint64_t size = 0;    // the whole file's size
  uint64_t offset = 0;  // where `data` starts
};

struct FileWritten {
  uint64_t bytes = 0;
  bool created = false;
};

// Guards one directory (a session's view). A path is workspace-relative; the check is
// lexical first (absolute, "..", a denied name at any depth, outside every prefix: refused
// with AIRLOCK_PATH_DENIED and the reason) and then made again by the kernel at the moment
// of use: openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS from the
// root descriptor, so a symlink at any depth, even one swapped in after the lexical check,
// is never followed. What is opened is then checked on its descriptor: a regular file with
// one link (a hard link could name a file outside), or a directory.
class PathGuard {
 public:
  // `readable` and `writable` are workspace-relative prefixes ("." for everything);
  // readable should include the writable ones. `denied_names` match case-insensitively.
  // `protected_paths` are readable but never writable (policy/protected_paths.h).
  static Result<PathGuard> open(const std::string& root, std::vector<std::string> readable,
                                std::vector<std::string> writable, std::vector<std::string> denied_names,
                                std::vector<policy::ProtectedPath> protected_paths = {});

  // The normalised relative path ("." for the root), or the refusal.
  Result<std::string> check(std::string_view path, Access access) const;

  // Reads [offset, offset+length) (length: to the end); more than `max_bytes` is
  // AIRLOCK_LIMIT_EXCEEDED naming the size, so the caller can ask for a range.
  Result<FileRead> read(std::string_view path, uint64_t offset, std::optional<uint64_t> length,
                        uint64_t max_bytes) const;
  // Writes the whole file atomically: a temporary file beside it, renamed over it, so a
  // reader sees the old bytes or the new, never half. Missing parent directories under a
  // writable prefix are made.
  Result<FileWritten> write(std::string_view path, std::string_view data, uint64_t max_bytes) const;
  // Entries sorted by name; denied names are not shown. Listing a directory above the
  // readable prefixes shows only the entries that lead to one.
  Result<Listing> list(std::string_view path, size_t max_entries) const;

  // Test seam for the attack suite: called with the normalised path after the lexical check
  // and before the kernel resolves it (where a racing attacker would swap in a symlink).
  std::function<void(const std::string&)> before_open;

 private:
  PathGuard(UniqueFd root, std::vector<std::string> r, std::vector<std::string> w, std::vector<std::string> d,
            std::vector<policy::ProtectedPath> p)
      : root_(std::move(root)), readable_(std::move(r)), writable_(std::move(w)), denied_(std::move(d)),
        protected_(std::move(p)) {}
  Result<UniqueFd> open_checked(const std::string& rel, int flags) const;
  bool leads_to_readable(const std::string& rel) const;

  UniqueFd root_;
  std::vector<std::string> readable_, writable_, denied_;
  std::vector<policy::ProtectedPath> protected_;
};

}  // namespace airlock::broker
