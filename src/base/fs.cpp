// Small file helpers.
#include "base/fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "base/hash.h"
#include "base/unique_fd.h"

namespace airlock {

Result<std::string> read_file(const std::string& path, Code code) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail_errno(code, "cannot open " + path, errno);
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno(code, "cannot read " + path, errno);
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Result<void> write_all(int fd, std::string_view bytes, Code code, const std::string& what) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno(code, what, errno);
    off += static_cast<size_t>(n);
  }
  return {};
}

Result<void> append_record(int fd, std::string_view bytes, Code code, const std::string& what) {
  ssize_t n;
  do {
    n = ::write(fd, bytes.data(), bytes.size());
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(bytes.size())) return fail_errno(code, what, n < 0 ? errno : ENOSPC);
  return {};
}

Result<void> write_file_atomic(const std::string& path, std::string_view bytes, unsigned mode) {
  std::string tmp = path + ".tmp-" + random_id().substr(0, 12);
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode));
  if (!fd) return fail_errno(Code::ConfigError, "cannot create " + tmp, errno);
  if (auto w = write_all(fd.get(), bytes, Code::ConfigError, "cannot write " + tmp); !w) {
    ::unlink(tmp.c_str());
    return w;
  }
  if (::rename(tmp.c_str(), path.c_str()) < 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return fail_errno(Code::ConfigError, "cannot rename into " + path, e);
  }
  return {};
}

Result<void> make_dirs(const std::string& path, unsigned mode) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return fail(Code::ConfigError, fmt::format("cannot create directory {}: {}", path, ec.message()));
  (void)mode;
  return {};
}

Result<void> remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);  // remove_all does not follow symlinks
  if (ec && ec != std::errc::no_such_file_or_directory)
    return fail(Code::ConfigError, fmt::format("cannot remove {}: {}", path, ec.message()));
  return {};
}

std::string absolute_path(const std::string& path) {
  return std::filesystem::absolute(path).lexically_normal().string();
}

}  // namespace airlock
