// Small file helpers that return Result: read a whole file, write one atomically, make dirs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/error.h"

namespace airlock {

Result<std::string> read_file(const std::string& path, Code code = Code::IoError);
// Writes to a temporary sibling and renames it over `path`: a reader never sees half a file.
Result<void> write_file_atomic(const std::string& path, std::string_view bytes, unsigned mode = 0644);
// Writes all of `bytes`, retrying short writes and EINTR; an error is `code` naming `what`.
Result<void> write_all(int fd, std::string_view bytes, Code code, const std::string& what);
// pwrite(2) of all of `bytes` at `offset`, retrying short writes and EINTR.
Result<void> write_all_at(int fd, std::string_view bytes, uint64_t offset, Code code, const std::string& what);
// One record appended with exactly one write(2) (O_APPEND keeps a record whole between writers):
// a short write is an error (ENOSPC), never completed by a second write.
Result<void> append_record(int fd, std::string_view bytes, Code code, const std::string& what);
// mkdir -p with `mode` for directories it creates.
Result<void> make_dirs(const std::string& path, unsigned mode = 0755);
// rm -rf that never follows symlinks; a missing path is fine.
Result<void> remove_tree(const std::string& path);
// Absolute, lexically normalised path (no symlink resolution).
std::string absolute_path(const std::string& path);

}  // namespace airlock
