// PathGuard: lexical checks, then openat2 beneath the root and checks on the open descriptor.
#include "broker/path_guard.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/beneath.h"
#include "base/hash.h"
#include "base/json_util.h"
#include "base/relpath.h"
#include "policy/task_policy.h"

namespace airlock::broker {

namespace {

std::unexpected<Error> denied(const std::string& path, std::string reason) {
  return fail(Code::PathDenied, fmt::format("{}: {}", path, reason), {{"path", path}, {"reason", reason}});
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir == ".") return name;
  std::string out = dir;
  out += '/';
  out += name;
  return out;
}

const char* type_of(mode_t m) {
  if (S_ISREG(m)) return "file";
  if (S_ISDIR(m)) return "dir";
  if (S_ISLNK(m)) return "symlink";
  return "other";
}

}  // namespace

Result<PathGuard> PathGuard::open(const std::string& root, std::vector<std::string> readable,
                                  std::vector<std::string> writable, std::vector<std::string> denied_names,
                                  std::vector<policy::ProtectedPath> protected_paths) {
  UniqueFd fd(::open(root.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return fail_errno(Code::IoError, "open the session view " + root, errno);
  for (const auto& w : writable)
    if (!under_any(w, readable)) readable.push_back(w);
  return PathGuard(std::move(fd), std::move(readable), std::move(writable), std::move(denied_names),
                   std::move(protected_paths));
}

Result<std::string> PathGuard::check(std::string_view path, Access access) const {
  std::string p(path);
  if (p.empty()) return denied(p, "the path is empty");
  if (p.find('\0') != std::string::npos) return denied(p, "the path holds a NUL byte");
  if (p.front() == '/') return denied(p, "an absolute path; paths are relative to the workspace");
  std::string rel;
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string::npos) end = p.size();
    std::string part = p.substr(start, end - start);
    start = end + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") return denied(p, "\"..\" leaves the directory it names");
    if (policy::is_denied_name(denied_, part))
      return denied(p, fmt::format("\"{}\" is a denied name; it is absent from the session's view", part));
    if (!rel.empty()) rel += '/';
    rel += part;
  }
  if (rel.empty()) rel.push_back('.');  // not `rel = "."`: g++ 12 warns falsely (-Wrestrict)
  if (access == Access::Write) {
    if (!under_any(rel, writable_)) return denied(rel, "outside every write_back_paths prefix");
    if (auto e = policy::protected_by(protected_, rel, false))
      return denied(rel, fmt::format("a protected path ({}: {}); it is read-only in every tier and never written back",
                                     e->pattern, e->why));
  } else if (!under_any(rel, readable_)) {
    return denied(rel, "outside every readable prefix");
  }
  return rel;
}

bool PathGuard::leads_to_readable(const std::string& rel) const {
  return std::any_of(readable_.begin(), readable_.end(), [&](const auto& r) { return is_under(r, rel); });
}

Result<UniqueFd> PathGuard::open_checked(const std::string& rel, int flags) const {
  if (before_open) before_open(rel);
  auto fd = open_beneath(root_.get(), rel == "." ? "" : rel, flags);
  if (fd) return fd;
  int err = fd.error().facts.value("errno", 0);
  switch (err) {
    case ELOOP: return denied(rel, "a symlink on the way; symlinks are never followed");
    case EXDEV: return denied(rel, "resolves outside the workspace");
    case ENOENT:
      return fail(Code::NotFound, fmt::format("{} does not exist", rel), {{"path", rel}});
    case ENOTDIR: return denied(rel, "a component on the way is not a directory");
    case ENXIO:
    case EWOULDBLOCK: return denied(rel, "a special file");
    default: return denied(rel, fmt::format("cannot be opened: {}", std::strerror(err)));
  }
}

Result<FileRead> PathGuard::read(std::string_view path, uint64_t offset, std::optional<uint64_t> length,
                                 uint64_t max_bytes) const {
  std::string rel = TRY(check(path, Access::Read));
  // O_NONBLOCK: opening a fifo must not hang; the descriptor is checked before any read.
  UniqueFd fd = TRY(open_checked(rel, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY));
  struct stat st{};
  if (::fstat(fd.get(), &st) < 0) return fail_errno(Code::PathDenied, "stat " + rel, errno);
  if (S_ISDIR(st.st_mode)) return denied(rel, "a directory; use list_dir");
  if (!S_ISREG(st.st_mode)) return denied(rel, "a special file");
  if (st.st_nlink != 1) return denied(rel, "a hard link; it could name a file outside the workspace");
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (offset > size) offset = size;
  uint64_t want = std::min(length.value_or(size - offset), size - offset);
  if (want > max_bytes)
    return fail(Code::LimitExceeded,
                fmt::format("{} holds {} bytes from offset {}; one read may return {} (ask for a range)", rel,
                            want, offset, max_bytes),
                {{"path", rel}, {"size", size}, {"offset", offset}, {"limit_bytes", max_bytes}});
  FileRead out;
  out.size = size;
  out.offset = offset;
  out.data.resize(want);
  size_t got = 0;
  while (got < want) {
    ssize_t n = ::pread(fd.get(), out.data.data() + got, want - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno(Code::PathDenied, "read " + rel, errno);
    if (n == 0) break;  // shrank under us: return what is there
    got += static_cast<size_t>(n);
  }
  out.data.resize(got);
  return out;
}

Result<FileWritten> PathGuard::write(std::string_view path, std::string_view data, uint64_t max_bytes) const {
  std::string rel = TRY(check(path, Access::Write));
  if (rel == ".") return denied(rel, "the workspace itself is a directory");
  if (data.size() > max_bytes)
    return fail(Code::LimitExceeded,
                fmt::format("{} bytes for {}; one write may carry {}", data.size(), rel, max_bytes),
                {{"path", rel}, {"bytes", data.size()}, {"limit_bytes", max_bytes}});
  // Make the missing directories one component at a time, each beneath the last.
  std::string parent = parent_of(rel);
  UniqueFd dir = TRY(open_checked(".", O_DIRECTORY | O_RDONLY));
  if (parent != ".") {
    std::string sofar = ".";
    size_t start = 0;
    while (start < parent.size()) {
      size_t end = parent.find('/', start);
      if (end == std::string::npos) end = parent.size();
      std::string part = parent.substr(start, end - start);
      start = end + 1;
      sofar = join(sofar, part);
      if (::mkdirat(dir.get(), part.c_str(), 0755) < 0 && errno != EEXIST)
        return fail_errno(Code::PathDenied, "mkdir " + sofar, errno);
      dir = TRY(open_checked(sofar, O_DIRECTORY | O_RDONLY));
    }
  }
  std::string name = name_of(rel);
  struct stat st{};
  bool exists = ::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  mode_t mode = 0644;
  if (exists) {
    if (S_ISLNK(st.st_mode)) return denied(rel, "a symlink; symlinks are never followed or replaced");
    if (S_ISDIR(st.st_mode)) return denied(rel, "a directory");
    if (!S_ISREG(st.st_mode)) return denied(rel, "a special file");
    if (st.st_nlink != 1) return denied(rel, "a hard link; it could name a file outside the workspace");
    mode = st.st_mode & 0777;
  }
  std::string tmp = fmt::format(".airlock-{}.tmp", random_id());
  UniqueFd out(::openat(dir.get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!out) return fail_errno(Code::PathDenied, "create a temporary file beside " + rel, errno);
  auto discard = [&] { ::unlinkat(dir.get(), tmp.c_str(), 0); };
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(out.get(), data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      discard();
      return fail_errno(Code::LimitExceeded, "write " + rel, e);
    }
    done += static_cast<size_t>(n);
  }
  ::fchmod(out.get(), mode);
  if (::renameat(dir.get(), tmp.c_str(), dir.get(), name.c_str()) < 0) {
    int e = errno;
    discard();
    return fail_errno(Code::PathDenied, "rename into " + rel, e);
  }
  return FileWritten{data.size(), !exists};
}

Result<Listing> PathGuard::list(std::string_view path, size_t max_entries) const {
  std::string p(path.empty() ? "." : path);
  auto rel = check(p, Access::Read);
  bool filtered = false;
  if (!rel) {
    // Above the readable prefixes: list only the way down to them.
    const Json& f = rel.error().facts;
    std::string r = f.value("path", std::string());
    if (rel.error().code != Code::PathDenied || f.value("reason", std::string()) != "outside every readable prefix" ||
        !leads_to_readable(r))
      return std::unexpected(rel.error());
    rel = r;
    filtered = true;
  }
  UniqueFd fd = TRY(open_checked(*rel, O_DIRECTORY | O_RDONLY));
  int dup = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return fail_errno(Code::IoError, "dup", errno);
  DIR* d = ::fdopendir(dup);
  if (!d) {
    ::close(dup);
    return fail_errno(Code::IoError, "fdopendir " + *rel, errno);
  }
  Listing out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == ".." || n.starts_with(".airlock-")) continue;
    if (policy::is_denied_name(denied_, n)) continue;
    std::string child = join(*rel, n);
    if (filtered && !leads_to_readable(child) && !under_any(child, readable_)) continue;
    struct stat st{};
    if (::fstatat(fd.get(), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
    out.entries.push_back({n, type_of(st.st_mode), S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0});
  }
  ::closedir(d);
  std::sort(out.entries.begin(), out.entries.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  if (out.entries.size() > max_entries) {
    out.entries.resize(max_entries);
    out.truncated = true;
  }
  return out;
}

}  // namespace airlock::broker
