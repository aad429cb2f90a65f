// Small file helpers.
#include "base/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>

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

Result<void> write_all_at(int fd, std::string_view bytes, uint64_t offset, Code code, const std::string& what) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno(code, what, errno);
    done += static_cast<size_t>(n);
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
  if (!fd) return fail_errno(Code::IoError, "cannot create " + tmp, errno);
  if (auto w = write_all(fd.get(), bytes, Code::IoError, "cannot write " + tmp); !w) {
    ::unlink(tmp.c_str());
    return w;
  }
  if (::rename(tmp.c_str(), path.c_str()) < 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return fail_errno(Code::IoError, "cannot rename into " + path, e);
  }
  return {};
}

Result<void> make_dirs(const std::string& path, unsigned mode) {
  if (path.empty()) return {};
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return {};
    return fail(Code::IoError, fmt::format("cannot create directory {}: something else is there", path));
  }
  // The missing parents first, each with `mode` (as the umask allows), then this one.
  if (auto slash = path.find_last_of('/'); slash != std::string::npos && slash > 0)
    TRY(make_dirs(path.substr(0, slash), mode));
  if (::mkdir(path.c_str(), static_cast<mode_t>(mode)) != 0) {
    int err = errno;
    // Made meanwhile by another: fine if it is a directory now (a dangling link is not).
    if (err != EEXIST || ::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return fail_errno(Code::IoError, "cannot create directory " + path, err == EEXIST ? ENOTDIR : err);
  }
  return {};
}

namespace {

// Gives the owner rwx on every directory beneath `dirfd` (never following a symlink), so a tree
// whose directories were made read-only (protected paths in a view, or a command's chmod) can be
// removed without privileges.
void make_dirs_removable(int dirfd, int depth) {
  if (depth > 4096) return;
  int dup = ::fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return;
  DIR* d = ::fdopendir(dup);
  if (!d) {
    ::close(dup);
    return;
  }
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    struct stat st{};
    if (::fstatat(dirfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode)) continue;
    ::fchmodat(dirfd, n.c_str(), 0700, 0);
    int sub = ::openat(dirfd, n.c_str(), O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) continue;
    make_dirs_removable(sub, depth + 1);
    ::close(sub);
  }
  ::closedir(d);
}

}  // namespace

Result<void> remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);  // remove_all does not follow symlinks
  if (ec && ec != std::errc::no_such_file_or_directory) {
    int fd = ::open(path.c_str(), O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      ::fchmod(fd, 0700);
      make_dirs_removable(fd, 0);
      ::close(fd);
    }
    ec.clear();
    std::filesystem::remove_all(path, ec);
  }
  if (ec && ec != std::errc::no_such_file_or_directory)
    return fail(Code::IoError, fmt::format("cannot remove {}: {}", path, ec.message()));
  return {};
}

std::string absolute_path(const std::string& path) {
  return std::filesystem::absolute(path).lexically_normal().string();
}

}  // namespace airlock
