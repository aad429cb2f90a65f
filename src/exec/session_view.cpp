// The session view: copy in, change detection by (inode, ctime, size), strict write-back.
#include "exec/session_view.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <filesystem>
#include <functional>
#include <sstream>

#include "base/fs.h"
#include "base/hash.h"
#include "base/relpath.h"
#include "base/unique_fd.h"
#include "base/beneath.h"

namespace airlock::exec {
namespace fs = std::filesystem;

namespace {

std::string join(const std::string& a, const std::string& b) {
  if (b == "." || b.empty()) return a;
  return a + "/" + b;
}


ViewEntry entry_of(const struct stat& st) {
  return {S_ISDIR(st.st_mode), st.st_ino, st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec,
          static_cast<uint64_t>(st.st_size)};
}

Result<void> copy_fd(int in, int out, const std::string& what) {
  for (;;) {
    ssize_t n = ::sendfile(out, in, nullptr, 1 << 30);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno(Code::ConfigError, "copying " + what, errno);
    if (n == 0) return {};
  }
}

// Why write-back refuses this entry, or empty when it may cross.
std::string refusal_reason(const struct stat& st) {
  if (S_ISLNK(st.st_mode)) return "symlink";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return "device";
  if (S_ISFIFO(st.st_mode)) return "fifo";
  if (S_ISSOCK(st.st_mode)) return "socket";
  if (S_ISDIR(st.st_mode)) return "";
  if (!S_ISREG(st.st_mode)) return "special file";
  if (st.st_mode & S_ISUID) return "setuid";
  if (st.st_mode & S_ISGID) return "setgid";
  if (st.st_nlink > 1) return "hard link";
  return "";
}

}  // namespace

namespace {

// "<pid> <start time in clock ticks since boot>": a pid alone may be reused.
std::string process_identity(pid_t pid) {
  auto stat = read_file(fmt::format("/proc/{}/stat", pid));
  if (!stat) return "";
  // Field 22 (starttime) counts from after the ")" that ends the command name.
  auto close = stat->rfind(')');
  if (close == std::string::npos || close + 2 >= stat->size()) return "";
  // A zombie is dead: its new parent (pid 1 here, which reaps late) has not collected it yet.
  char state = (*stat)[close + 2];
  if (state == 'Z' || state == 'X') return "";
  std::istringstream in(stat->substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && in >> field; ++i) {
  }
  return fmt::format("{} {}", pid, field);
}

}  // namespace

Result<SessionDirs> make_session_dirs(const std::string& state_dir, const std::string& id) {
  SessionDirs d{state_dir + "/sessions/" + id, "", ""};
  d.view = d.root + "/view";
  d.scratch = d.root + "/tmp";
  TRY(make_dirs(state_dir + "/sessions"));
  if (::mkdir(d.root.c_str(), 0700) < 0) return fail_errno(Code::ConfigError, "mkdir " + d.root, errno);
  if (::mkdir(d.view.c_str(), 0700) < 0) return fail_errno(Code::ConfigError, "mkdir " + d.view, errno);
  if (::mkdir(d.scratch.c_str(), 0700) < 0) return fail_errno(Code::ConfigError, "mkdir " + d.scratch, errno);
  TRY(write_file_atomic(d.root + "/owner", process_identity(::getpid()), 0600));
  return d;
}

Result<void> remove_session_dirs(const SessionDirs& d) { return remove_tree(d.root); }

std::vector<std::string> sweep_abandoned_sessions(const std::string& state_dir) {
  std::vector<std::string> swept;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(state_dir + "/sessions", ec)) {
    std::string id = e.path().filename().string();
    auto owner = read_file(e.path().string() + "/owner");
    if (!owner) continue;  // being made right now, or not ours to judge
    pid_t pid = 0;
    if (std::sscanf(owner->c_str(), "%d", &pid) != 1 || pid <= 0) continue;
    if (process_identity(pid) == *owner) continue;  // its owner still runs
    if (remove_tree(e.path().string())) swept.push_back(id);
  }
  return swept;
}

namespace {

// The listed paths without those another listed path already covers ("." covers all).
std::vector<std::string> outermost(std::vector<std::string> paths) {
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  std::vector<std::string> out;
  for (const auto& p : paths)
    if (!under_any(p, out)) out.push_back(p);
  return out;
}

std::vector<std::string> list_names(int dirfd) {
  std::vector<std::string> names;
  int dup = ::fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return names;
  DIR* d = ::fdopendir(dup);
  if (!d) {
    ::close(dup);
    return names;
  }
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

Result<UniqueFd> open_subdir(int dirfd, const std::string& name, const std::string& what) {
  UniqueFd fd(::openat(dirfd, name.c_str(), O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fail_errno(Code::ConfigError, "open " + what, errno);
  return fd;
}

// write_back's temporary file, ".airlock-wb-" and 12 hex digits: one a write-back killed mid-copy
// (SIGKILL) left behind is never copied into a view, and once stale it is removed. A live one is
// written to and renamed within moments, so an hour-old one has no writer.
bool is_write_back_temp(const std::string& name) {
  constexpr std::string_view kPrefix = ".airlock-wb-";
  return name.size() == kPrefix.size() + 12 && name.starts_with(kPrefix) &&
         name.find_first_not_of("0123456789abcdef", kPrefix.size()) == std::string::npos;
}
void sweep_write_back_temp(int dirfd, const std::string& name, const struct stat& st) {
  if (S_ISREG(st.st_mode) && ::time(nullptr) - st.st_mtime > kStaleWriteBackTempSeconds)
    (void)::unlinkat(dirfd, name.c_str(), 0);
}

// Copies one workspace entry (never following a symlink) into the view, recursively.
Result<void> copy_entry(int src_dir, int dst_dir, const std::string& name, const std::string& rel, ViewCopy& out) {
  struct stat st{};
  if (::fstatat(src_dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0)
    return fail_errno(Code::ConfigError, "stat " + rel + " in the workspace", errno);
  if (is_write_back_temp(name)) {
    sweep_write_back_temp(src_dir, name, st);
    return {};
  }
  if (S_ISDIR(st.st_mode)) {
    if (::mkdirat(dst_dir, name.c_str(), (st.st_mode & 0777) | 0700) < 0 && errno != EEXIST)
      return fail_errno(Code::ConfigError, "mkdir " + rel + " in the view", errno);
    UniqueFd src = TRY(open_subdir(src_dir, name, rel + " in the workspace"));
    UniqueFd dst = TRY(open_subdir(dst_dir, name, rel + " in the view"));
    for (const auto& child : list_names(src.get())) TRY(copy_entry(src.get(), dst.get(), child, rel + "/" + child, out));
  } else if (S_ISREG(st.st_mode)) {
    UniqueFd in(::openat(src_dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!in) return fail_errno(Code::ConfigError, "open " + rel + " in the workspace", errno);
    UniqueFd o(::openat(dst_dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, st.st_mode & 0777));
    if (!o) return fail_errno(Code::ConfigError, "create " + rel + " in the view", errno);
    TRY(copy_fd(in.get(), o.get(), rel));
    ::fchmod(o.get(), st.st_mode & 0777);  // exactly the workspace's bits, whatever the umask
    out.files++;
    out.bytes += static_cast<uint64_t>(st.st_size);
  } else {
    out.skipped.push_back(rel);  // symlinks and special files never enter the view
    return {};
  }
  struct stat vst{};
  if (::fstatat(dst_dir, name.c_str(), &vst, AT_SYMLINK_NOFOLLOW) == 0) out.manifest[rel] = entry_of(vst);
  return {};
}

// mkdir -p of `rel` inside the view, which holds nothing but what we made.
Result<void> make_view_dirs(const std::string& view, const std::string& rel) { return make_dirs(join(view, rel)); }

}  // namespace

Result<ViewCopy> create_view(const std::string& workspace, const std::string& view,
                             const std::vector<std::string>& paths,
                             const std::vector<std::string>& write_back_paths) {
  ViewCopy out;
  if (workspace.empty()) {
    // No workspace: an empty view, with the write-back paths as empty directories.
    for (const auto& w : write_back_paths)
      if (w != ".") TRY(make_view_dirs(view, w));
    return out;
  }
  UniqueFd ws(::open(workspace.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
  if (!ws) return fail_errno(Code::ConfigError, "open workspace " + workspace, errno);
  UniqueFd vw(::open(view.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
  if (!vw) return fail_errno(Code::ConfigError, "open view " + view, errno);

  for (const auto& p : outermost(paths)) {
    if (p == ".") {
      for (const auto& child : list_names(ws.get())) TRY(copy_entry(ws.get(), vw.get(), child, child, out));
      continue;
    }
    // The parents must be real directories beneath the workspace: a symlinked parent would
    // copy something from outside into the view.
    auto parent = open_beneath(ws.get(), parent_of(p), O_DIRECTORY | O_RDONLY);
    struct stat st{};
    bool missing = false;
    if (!parent) {
      int e = parent.error().facts.value("errno", 0);
      if (e != ENOENT) {
        out.skipped.push_back(p);
        continue;
      }
      missing = true;
    } else if (::fstatat(parent->get(), name_of(p).c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno != ENOENT) return fail_errno(Code::ConfigError, "stat " + p + " in the workspace", errno);
      missing = true;
    }
    if (missing) continue;  // a missing write-back path is made below
    TRY(make_view_dirs(view, parent_of(p)));
    auto vparent = TRY(open_beneath(vw.get(), parent_of(p), O_DIRECTORY | O_RDONLY));
    TRY(copy_entry(parent->get(), vparent.get(), name_of(p), p, out));
  }
  // Every write-back path exists in the view, so the command can create what it writes there.
  for (const auto& w : write_back_paths) {
    struct stat st{};
    if (w != "." && ::lstat(join(view, w).c_str(), &st) < 0 && errno == ENOENT) TRY(make_view_dirs(view, w));
  }
  return out;
}

Json WriteBackReport::to_json() const {
  Json refusals = Json::array();
  for (const auto& r : refused) refusals.push_back({{"path", r.path}, {"reason", r.reason}});
  return {{"written", written}, {"created_dirs", created_dirs}, {"deleted", deleted}, {"refused", refusals}};
}

Result<WriteBackReport> write_back(const std::string& view, const std::string& workspace,
                                   const ViewManifest& manifest,
                                   const std::vector<std::string>& write_back_paths) {
  WriteBackReport rep;
  if (workspace.empty()) return rep;
  UniqueFd ws(::open(workspace.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
  if (!ws) return fail_errno(Code::ConfigError, "open workspace " + workspace, errno);
  UniqueFd vw(::open(view.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
  if (!vw) return fail_errno(Code::ConfigError, "open view " + view, errno);

  // Pass 1: walk the view by descriptor (nothing runs in it any more; no symlink is ever
  // followed, at any depth) and decide every entry.
  struct Op {
    std::string rel;
    bool dir;
    mode_t mode;
    ino_t ino;
  };
  std::vector<Op> ops;
  std::vector<std::string> seen;
  std::vector<std::string> refused_prefixes;
  auto refuse = [&](const std::string& rel, std::string why) {
    rep.refused.push_back({rel, std::move(why)});
    refused_prefixes.push_back(rel);
  };
  std::function<Result<void>(int, const std::string&, const std::string&)> visit =
      [&](int dirfd, const std::string& name, const std::string& rel) -> Result<void> {
    struct stat st{};
    if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno == ENOENT) return {};
      return fail_errno(Code::ConfigError, "stat " + rel + " in the view", errno);
    }
    seen.push_back(rel);
    if (std::string why = refusal_reason(st); !why.empty()) {
      refuse(rel, why);
      return {};
    }
    if (S_ISDIR(st.st_mode)) {
      ops.push_back({rel, true, st.st_mode & 0777, st.st_ino});
      UniqueFd sub = TRY(open_subdir(dirfd, name, rel + " in the view"));
      for (const auto& child : list_names(sub.get())) TRY(visit(sub.get(), child, rel + "/" + child));
      return {};
    }
    auto m = manifest.find(rel);
    ViewEntry now = entry_of(st);
    bool unchanged = m != manifest.end() && !m->second.is_dir && m->second.ino == now.ino &&
                     m->second.ctime_ns == now.ctime_ns && m->second.size == now.size;
    if (!unchanged) ops.push_back({rel, false, st.st_mode & 0777, st.st_ino});
    return {};
  };
  for (const auto& p : outermost(write_back_paths)) {
    if (p == ".") {
      for (const auto& child : list_names(vw.get())) TRY(visit(vw.get(), child, child));
      continue;
    }
    auto vparent = open_beneath(vw.get(), parent_of(p), O_DIRECTORY | O_RDONLY);
    if (!vparent) {
      int e = vparent.error().facts.value("errno", 0);
      if (e == ENOENT) continue;  // gone from the view: the deletions below handle it
      refuse(p, e == ELOOP ? "symlink" : "conflict: " + vparent.error().message);
      continue;
    }
    TRY(visit(vparent->get(), name_of(p), p));
  }

  // Pass 2: apply, parents before children; every workspace path resolved beneath it.
  for (const auto& op : ops) {
    if (under_any(op.rel, refused_prefixes)) continue;
    if (op.dir && op.rel == ".") continue;
    auto parent = open_beneath(ws.get(), parent_of(op.rel), O_DIRECTORY | O_RDONLY);
    if (!parent) {
      rep.refused.push_back({op.rel, "conflict: " + parent.error().message});
      refused_prefixes.push_back(op.rel);
      continue;
    }
    std::string name = name_of(op.rel);
    struct stat cur{};
    bool exists = ::fstatat(parent->get(), name.c_str(), &cur, AT_SYMLINK_NOFOLLOW) == 0;
    if (op.dir) {
      if (exists && S_ISDIR(cur.st_mode)) continue;
      if (exists) {
        rep.refused.push_back({op.rel, "conflict: the workspace has a non-directory there"});
        refused_prefixes.push_back(op.rel);
        continue;
      }
      if (::mkdirat(parent->get(), name.c_str(), op.mode) < 0)
        return fail_errno(Code::ConfigError, "mkdir " + op.rel + " in the workspace", errno);
      ::fchmodat(parent->get(), name.c_str(), op.mode, 0);  // exactly the view's bits, whatever the umask
      rep.created_dirs.push_back(op.rel);
      continue;
    }
    if (exists && !S_ISREG(cur.st_mode)) {
      rep.refused.push_back({op.rel, "conflict: the workspace has a non-regular file there"});
      continue;
    }
    // Re-checked on the open descriptor: should anything have swapped the entry since pass 1
    // (a fifo would block, a hard link or a device must not cross), it is refused, not read.
    UniqueFd in = TRY(open_beneath(vw.get(), op.rel, O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
    struct stat now{};
    if (::fstat(in.get(), &now) < 0) return fail_errno(Code::ConfigError, "stat " + op.rel + " in the view", errno);
    if (std::string why = refusal_reason(now); !why.empty() || now.st_ino != op.ino) {
      rep.refused.push_back({op.rel, why.empty() ? "changed during write-back" : why});
      continue;
    }
    std::string tmp = ".airlock-wb-" + random_id().substr(0, 12);
    UniqueFd out(::openat(parent->get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out) return fail_errno(Code::ConfigError, "create a temporary file for " + op.rel, errno);
    auto copied = copy_fd(in.get(), out.get(), op.rel);
    if (copied && ::fchmod(out.get(), op.mode) < 0) copied = fail_errno(Code::ConfigError, "chmod", errno);
    if (copied && ::renameat(parent->get(), tmp.c_str(), parent->get(), name.c_str()) < 0)
      copied = fail_errno(Code::ConfigError, "rename " + op.rel + " into the workspace", errno);
    if (!copied) {
      ::unlinkat(parent->get(), tmp.c_str(), 0);
      return std::unexpected(copied.error());
    }
    rep.written.push_back(op.rel);
  }

  // Deletions: what the view had when made, under write-back paths, and no longer has.
  std::sort(seen.begin(), seen.end());
  std::vector<std::string> gone;
  for (const auto& [rel, entry] : manifest)
    if (under_any(rel, write_back_paths) && !under_any(rel, refused_prefixes) &&
        !std::binary_search(seen.begin(), seen.end(), rel))
      gone.push_back(rel);
  std::sort(gone.rbegin(), gone.rend());  // children before parents
  for (const auto& rel : gone) {
    auto parent = open_beneath(ws.get(), parent_of(rel), O_DIRECTORY | O_RDONLY);
    if (!parent) continue;
    struct stat cur{};
    std::string name = name_of(rel);
    if (::fstatat(parent->get(), name.c_str(), &cur, AT_SYMLINK_NOFOLLOW) < 0) continue;
    bool dir = manifest.at(rel).is_dir;
    if (dir != S_ISDIR(cur.st_mode) || (!dir && !S_ISREG(cur.st_mode))) continue;
    if (::unlinkat(parent->get(), name.c_str(), dir ? AT_REMOVEDIR : 0) == 0) rep.deleted.push_back(rel);
  }
  return rep;
}

}  // namespace airlock::exec
