// The session view: copy in, change detection by (inode, ctime, size), strict write-back.
#include "exec/session_view.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <sstream>

#include "base/fs.h"
#include "base/hash.h"
#include "base/unique_fd.h"
#include "linux/beneath.h"

namespace airlock::exec {
namespace fs = std::filesystem;

namespace {

bool is_under(const std::string& rel, const std::string& prefix) {
  if (prefix == ".") return true;
  return rel == prefix || (rel.size() > prefix.size() && rel.compare(0, prefix.size(), prefix) == 0 &&
                           rel[prefix.size()] == '/');
}

bool under_any(const std::string& rel, const std::vector<std::string>& prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(), [&](const auto& p) { return is_under(rel, p); });
}

std::string join(const std::string& a, const std::string& b) {
  if (b == "." || b.empty()) return a;
  return a + "/" + b;
}

std::string parent_of(const std::string& rel) {
  auto slash = rel.rfind('/');
  return slash == std::string::npos ? "." : rel.substr(0, slash);
}
std::string name_of(const std::string& rel) {
  auto slash = rel.rfind('/');
  return slash == std::string::npos ? rel : rel.substr(slash + 1);
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
  if (close == std::string::npos) return "";
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

Result<ViewCopy> create_view(const std::string& workspace, const std::string& view,
                             const std::vector<std::string>& paths,
                             const std::vector<std::string>& write_back_paths) {
  ViewCopy out;
  std::error_code ec;
  auto copy_one = [&](const std::string& rel) -> Result<void> {
    std::string src = join(workspace, rel), dst = join(view, rel);
    struct stat st{};
    if (::lstat(src.c_str(), &st) < 0) return fail_errno(Code::ConfigError, "lstat " + src, errno);
    if (S_ISDIR(st.st_mode)) {
      if (::mkdir(dst.c_str(), (st.st_mode & 0777) | 0700) < 0 && errno != EEXIST)
        return fail_errno(Code::ConfigError, "mkdir " + dst, errno);
    } else if (S_ISREG(st.st_mode)) {
      UniqueFd in(::open(src.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
      if (!in) return fail_errno(Code::ConfigError, "open " + src, errno);
      UniqueFd outfd(::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st.st_mode & 0777));
      if (!outfd) return fail_errno(Code::ConfigError, "create " + dst, errno);
      TRY(copy_fd(in.get(), outfd.get(), src));
      out.files++;
      out.bytes += static_cast<uint64_t>(st.st_size);
    } else {
      out.skipped.push_back(rel);
      return {};
    }
    struct stat vst{};
    if (::lstat(dst.c_str(), &vst) == 0) out.manifest[rel] = entry_of(vst);
    return {};
  };

  if (workspace.empty()) {
    // No workspace: an empty view, with the write-back paths as empty directories.
    for (const auto& w : write_back_paths)
      if (w != ".") TRY(make_dirs(join(view, w)));
    return out;
  }
  for (const auto& p : paths) {
    std::string src = join(workspace, p);
    struct stat st{};
    if (::lstat(src.c_str(), &st) < 0) {
      if (errno == ENOENT) {
        if (std::find(write_back_paths.begin(), write_back_paths.end(), p) != write_back_paths.end() && p != ".")
          TRY(make_dirs(join(view, p)));
        continue;
      }
      return fail_errno(Code::ConfigError, "lstat " + src, errno);
    }
    // Parents of a nested path exist in the view as directories, never as copies.
    if (p != ".") TRY(make_dirs(join(view, parent_of(p))));
    if (p != ".") TRY(copy_one(p));
    if (!S_ISDIR(st.st_mode)) continue;
    fs::recursive_directory_iterator it(src, fs::directory_options::none, ec), end;
    if (ec) return fail(Code::ConfigError, fmt::format("cannot list {}: {}", src, ec.message()));
    for (; it != end; it.increment(ec)) {
      if (ec) return fail(Code::ConfigError, fmt::format("cannot list {}: {}", src, ec.message()));
      std::string rel = fs::relative(it->path(), workspace).string();
      if (out.manifest.count(rel)) {
        it.disable_recursion_pending();
        continue;
      }
      TRY(copy_one(rel));
    }
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

  // Pass 1: walk the view (nothing runs in it any more) and decide every entry.
  struct Op {
    std::string rel;
    bool dir;
    mode_t mode;
  };
  std::vector<Op> ops;
  std::vector<std::string> seen;
  std::vector<std::string> refused_prefixes;
  std::function<Result<void>(const std::string&)> walk = [&](const std::string& rel) -> Result<void> {
    std::string abs = join(view, rel);
    struct stat st{};
    if (::lstat(abs.c_str(), &st) < 0) {
      if (errno == ENOENT) return {};
      return fail_errno(Code::ConfigError, "lstat " + abs, errno);
    }
    seen.push_back(rel);
    if (std::string why = refusal_reason(st); !why.empty()) {
      rep.refused.push_back({rel, why});
      refused_prefixes.push_back(rel);
      return {};
    }
    if (S_ISDIR(st.st_mode)) {
      if (rel != ".") ops.push_back({rel, true, st.st_mode & 0777});
      UniqueFd dfd(::open(abs.c_str(), O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
      if (!dfd) return fail_errno(Code::ConfigError, "open " + abs, errno);
      DIR* d = ::fdopendir(dfd.release());
      std::vector<std::string> names;
      while (dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") names.push_back(n);
      }
      ::closedir(d);
      std::sort(names.begin(), names.end());
      for (const auto& n : names) TRY(walk(rel == "." ? n : rel + "/" + n));
      return {};
    }
    auto m = manifest.find(rel);
    ViewEntry now = entry_of(st);
    bool unchanged = m != manifest.end() && !m->second.is_dir && m->second.ino == now.ino &&
                     m->second.ctime_ns == now.ctime_ns && m->second.size == now.size;
    if (!unchanged) ops.push_back({rel, false, st.st_mode & 0777});
    return {};
  };
  for (const auto& p : write_back_paths) TRY(walk(p));

  // Pass 2: apply, parents before children; every workspace path resolved beneath it.
  for (const auto& op : ops) {
    if (under_any(op.rel, refused_prefixes)) continue;
    auto parent = linux::open_beneath(ws.get(), parent_of(op.rel), O_DIRECTORY | O_RDONLY);
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
      rep.created_dirs.push_back(op.rel);
      continue;
    }
    if (exists && !S_ISREG(cur.st_mode)) {
      rep.refused.push_back({op.rel, "conflict: the workspace has a non-regular file there"});
      continue;
    }
    UniqueFd in(::open(join(view, op.rel).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!in) return fail_errno(Code::ConfigError, "open " + op.rel + " in the view", errno);
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
    if (under_any(rel, write_back_paths) && !std::binary_search(seen.begin(), seen.end(), rel))
      gone.push_back(rel);
  std::sort(gone.rbegin(), gone.rend());  // children before parents
  for (const auto& rel : gone) {
    auto parent = linux::open_beneath(ws.get(), parent_of(rel), O_DIRECTORY | O_RDONLY);
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
