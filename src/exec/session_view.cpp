// The session view: copy in, change detection by (inode, ctime, size), strict write-back.
#include "exec/session_view.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/sendfile.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cerrno>
#include <ctime>
#include <filesystem>
#include <functional>
#include <sstream>

#include "base/child_process.h"
#include "base/fs.h"
#include "base/hash.h"
#include "base/relpath.h"
#include "base/unique_fd.h"
#include "base/beneath.h"
#include "linux/cgroup.h"

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
    if (n < 0) return fail_errno(Code::IoError, "copying " + what, errno);
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

// Whether `rel` holds the same bytes and permission bits in the view and in the workspace: a file
// rewritten with what it held (git rewrites .git/config on `branch -D`, freshens an object) is no
// change. Regular files only, opened without following a symlink.
bool same_in_both(int view, int ws, const std::string& rel) {
  auto a = open_beneath(view, rel, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  auto b = open_beneath(ws, rel, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  struct stat sa{}, sb{};
  if (!a || !b || ::fstat(a->get(), &sa) < 0 || ::fstat(b->get(), &sb) < 0) return false;
  // Write bits aside: the first wall cleared them in the view, and git keeps a file's mode.
  if (!S_ISREG(sa.st_mode) || !S_ISREG(sb.st_mode) || sa.st_size != sb.st_size ||
      (sa.st_mode & 07555) != (sb.st_mode & 07555))
    return false;
  char x[65536], y[65536];
  for (;;) {
    ssize_t n = ::read(a->get(), x, sizeof x);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    ssize_t got = 0;
    while (got < n) {
      ssize_t m = ::read(b->get(), y + got, static_cast<size_t>(n - got));
      if (m < 0 && errno == EINTR) continue;
      if (m <= 0) return false;
      got += m;
    }
    if (std::memcmp(x, y, static_cast<size_t>(n)) != 0) return false;
  }
}

// As git's own is_git_directory, a little wider: a HEAD, and objects, refs or a commondir, each of
// any type (git asks only that objects and refs be accessible).
bool looks_like_git(int dirfd) {
  struct stat st{};
  if (::fstatat(dirfd, "HEAD", &st, AT_SYMLINK_NOFOLLOW) != 0) return false;
  for (const char* n : {"objects", "refs", "commondir"})
    if (::fstatat(dirfd, n, &st, AT_SYMLINK_NOFOLLOW) == 0) return true;
  return false;
}

// Whether `rel` is a `.git` or lies beneath one (its logs/ holds a HEAD and refs/, and is no
// repository of its own); any case, as protected paths match.
bool in_dot_git(const std::string& rel) {
  for (size_t start = 0; start <= rel.size();) {
    size_t end = rel.find('/', start);
    if (end == std::string::npos) end = rel.size();
    if (end - start == 4 && ::strncasecmp(rel.c_str() + start, ".git", 4) == 0) return true;
    start = end + 1;
  }
  return false;
}

// Whether the view's `rel` holds a HEAD git reads: "ref: refs/..." or an object id, one line.
bool valid_head(int view, const std::string& rel) {
  auto fd = open_beneath(view, rel, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  if (!fd) return false;
  char buf[1024];
  ssize_t n = ::read(fd->get(), buf, sizeof buf);
  if (n <= 1 || n == static_cast<ssize_t>(sizeof buf) || buf[n - 1] != '\n') return false;
  std::string_view s(buf, static_cast<size_t>(n - 1));
  if (s.starts_with("ref: refs/")) {
    for (char c : s.substr(10))
      if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f || c == '\\' || c == ':') return false;
    return s.find("..") == std::string_view::npos;
  }
  if (s.size() != 40 && s.size() != 64) return false;
  return s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::string protected_reason(const policy::ProtectedPath& p) {
  return fmt::format("protected path ({}: {})", p.pattern, p.why);
}

}  // namespace

namespace {

// The owner file's text: "<pid> <start time in clock ticks since boot>" (a pid alone may be reused).
struct Owner {
  pid_t pid = 0;
  long long start_time = 0;
};
std::optional<Owner> parse_owner(const std::string& text) {
  Owner o;
  if (std::sscanf(text.c_str(), "%d %lld", &o.pid, &o.start_time) != 2 || o.pid <= 0) return std::nullopt;
  return o;
}

}  // namespace

namespace {

// STATE/sessions.lock, held while the sweep runs and a session directory is made with its owner file:
// so a directory without an owner file, seen under the lock, was left by an airlock killed while
// making it or while removing it (the owner file goes last), never by one at work.
Result<UniqueFd> lock_sessions(const std::string& sessions) {
  std::string path = sessions + ".lock";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return fail_errno(Code::IoError, "open " + path, errno);
  while (::flock(fd.get(), LOCK_EX) < 0)
    if (errno != EINTR) return fail_errno(Code::IoError, "flock " + path, errno);
  return fd;
}

// Sweeps with STATE/sessions.lock held.
std::vector<std::string> sweep_locked(const std::string& sessions) {
  std::vector<std::string> swept;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(sessions, ec)) {
    std::string id = e.path().filename().string();
    if (!e.is_directory(ec)) continue;
    std::string owner_path = e.path().string() + "/owner";
    struct stat st{};
    if (::lstat(owner_path.c_str(), &st) == 0) {
      if (!S_ISREG(st.st_mode)) continue;  // not a file airlock wrote: not ours to judge
      auto text = read_file(owner_path);
      auto owner = text ? parse_owner(*text) : std::nullopt;
      if (!owner) continue;
      // Alive, or cannot be told (its pid exists, its stat is unreadable): never removed on a guess.
      if (same_process(owner->pid, owner->start_time).value_or(true)) continue;
    } else if (errno != ENOENT) {
      continue;
    }
    if (remove_tree(e.path().string())) swept.push_back(id);
  }
  linux::release_abandoned_cgroups(swept);
  return swept;
}

}  // namespace

Result<SessionDirs> make_session_dirs(const std::string& state_dir, const std::string& id) {
  SessionDirs d{state_dir + "/sessions/" + id, "", "", {}};
  d.view = d.root + "/view";
  d.scratch = d.root + "/tmp";
  std::string sessions = state_dir + "/sessions";
  TRY(make_dirs(sessions));
  UniqueFd lock = TRY(lock_sessions(sessions));
  // What an airlock killed with SIGKILL left behind (views, cgroups) goes before a new one is made.
  (void)sweep_locked(sessions);
  auto me = process_start_time(::getpid());
  if (!me) return fail(Code::IoError, "cannot read /proc/self/stat: a session needs its owner's identity");
  if (::mkdir(d.root.c_str(), 0700) < 0) return fail_errno(Code::IoError, "mkdir " + d.root, errno);
  auto made = [&]() -> Result<void> {
    // The owner file first: from here on a kill leaves a directory the next sweep knows to be dead.
    TRY(write_file_atomic(d.root + "/owner", fmt::format("{} {}", ::getpid(), *me), 0600));
    if (::mkdir(d.view.c_str(), 0700) < 0) return fail_errno(Code::IoError, "mkdir " + d.view, errno);
    if (::mkdir(d.scratch.c_str(), 0700) < 0) return fail_errno(Code::IoError, "mkdir " + d.scratch, errno);
    return {};
  }();
  if (!made) {
    (void)remove_tree(d.root);
    return std::unexpected(std::move(made).error());
  }
  return d;
}

Result<void> remove_session_dirs(const SessionDirs& d) {
  // Everything but the owner file, then the owner file, then the directory: a kill at any step
  // leaves either a dead owner's directory or an empty one without an owner, and the sweep
  // removes both.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(d.root, ec))
    if (e.path().filename() != "owner") TRY(remove_tree(e.path().string()));
  if (ec && ec != std::errc::no_such_file_or_directory)
    return fail(Code::IoError, fmt::format("cannot list {}: {}", d.root, ec.message()));
  if (::unlink((d.root + "/owner").c_str()) < 0 && errno != ENOENT)
    return fail_errno(Code::IoError, "unlink " + d.root + "/owner", errno);
  if (::rmdir(d.root.c_str()) < 0 && errno != ENOENT) return fail_errno(Code::IoError, "rmdir " + d.root, errno);
  return {};
}

std::vector<std::string> sweep_abandoned_sessions(const std::string& state_dir) {
  std::string sessions = state_dir + "/sessions";
  auto lock = lock_sessions(sessions);
  if (!lock) return {};
  return sweep_locked(sessions);
}

std::optional<pid_t> live_session_owner(const std::string& root) {
  auto text = read_file(root + "/owner");
  auto owner = text ? parse_owner(*text) : std::nullopt;
  if (!owner || same_process(owner->pid, owner->start_time) != true) return std::nullopt;
  return owner->pid;
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
  if (!fd) return fail_errno(Code::IoError, "open " + what, errno);
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

// Whether `rel` lies in a git object store (".git/objects/…", a submodule's too). A local clone
// hard-links these to the repository it came from; their bytes are objects of this repository
// (named by their own hash), so copying them exposes nothing the repository does not hold.
bool in_git_objects(const std::string& rel) {
  auto git = rel.find(".git/");
  return (git == 0 || (git != std::string::npos && rel[git - 1] == '/')) &&
         rel.find("/objects/", git + 4) != std::string::npos;
}

// Why an entry of the workspace never enters the view, or empty when it may.
std::string skip_reason(const struct stat& st, const std::string& rel) {
  if (S_ISDIR(st.st_mode)) return "";
  if (S_ISREG(st.st_mode)) return st.st_nlink > 1 && !in_git_objects(rel) ? "hard link" : "";
  return refusal_reason(st);  // symlinks and special files
}

// Copies one workspace entry (never following a symlink) into the view, recursively.
// `under_protected`: an ancestor is a protected path, so this entry is made read-only too.
Result<void> copy_entry(int src_dir, int dst_dir, const std::string& name, const std::string& rel,
                        const ViewRules& rules, bool under_protected, ViewCopy& out) {
  if (policy::is_denied_name(rules.denied_names, name)) {
    out.skipped.push_back({rel, "denied name"});
    return {};
  }
  struct stat st{};
  if (::fstatat(src_dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0)
    return fail_errno(Code::IoError, "stat " + rel + " in the workspace", errno);
  if (is_write_back_temp(name)) {
    sweep_write_back_temp(src_dir, name, st);
    return {};
  }
  if (std::string why = skip_reason(st, rel); !why.empty()) {
    // A hard link is never copied: its bytes may be a file outside the workspace.
    out.skipped.push_back({rel, why});
    return {};
  }
  bool is_dir = S_ISDIR(st.st_mode);
  bool protect = under_protected;
  if (!protect && policy::protected_by(rules.protected_paths, rel, is_dir)) {
    out.protected_present.push_back(rel);
    protect = true;
  }
  // The first wall's write bits: cleared on a protected path and everything beneath it.
  mode_t mode = st.st_mode & 0777;
  if (protect && rules.first_wall) mode &= ~mode_t{0222};
  if (is_dir) {
    if (::mkdirat(dst_dir, name.c_str(), mode | 0500) < 0 && errno != EEXIST)
      return fail_errno(Code::IoError, "mkdir " + rel + " in the view", errno);
    UniqueFd src = TRY(open_subdir(src_dir, name, rel + " in the workspace"));
    UniqueFd dst = TRY(open_subdir(dst_dir, name, rel + " in the view"));
    // Writable while we fill it, then the mode it keeps.
    if (::fchmod(dst.get(), 0700) < 0) return fail_errno(Code::IoError, "chmod " + rel + " in the view", errno);
    for (const auto& child : list_names(src.get()))
      TRY(copy_entry(src.get(), dst.get(), child, rel + "/" + child, rules, protect, out));
    if (::fchmod(dst.get(), protect && rules.first_wall ? mode | 0500 : mode | 0700) < 0)
      return fail_errno(Code::IoError, "chmod " + rel + " in the view", errno);
  } else {
    UniqueFd in(::openat(src_dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!in) return fail_errno(Code::IoError, "open " + rel + " in the workspace", errno);
    UniqueFd o(::openat(dst_dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!o) return fail_errno(Code::IoError, "create " + rel + " in the view", errno);
    TRY(copy_fd(in.get(), o.get(), rel));
    ::fchmod(o.get(), mode);  // exactly the workspace's bits (less the first wall's), whatever the umask
    out.files++;
    out.bytes += static_cast<uint64_t>(st.st_size);
  }
  struct stat vst{};
  if (::fstatat(dst_dir, name.c_str(), &vst, AT_SYMLINK_NOFOLLOW) == 0) out.manifest[rel] = entry_of(vst);
  return {};
}

// mkdir -p of `rel` inside the view, which holds nothing but what we made.
Result<void> make_view_dirs(const std::string& view, const std::string& rel) { return make_dirs(join(view, rel)); }

}  // namespace

ViewRules view_rules(const plan::ExecutionPlan& plan) {
  return {plan.view_paths, plan.write_back_paths, plan.denied_names, plan.protected_paths,
          plan.protected_first_wall};
}

namespace {

std::string trim(std::string_view v) {
  size_t a = v.find_first_not_of(" \t\r"), b = v.find_last_not_of(" \t\r");
  return a == std::string_view::npos ? std::string() : std::string(v.substr(a, b - a + 1));
}

// A path git names, as a workspace-relative pattern: `base` is where a relative one starts
// ("" the work tree, ".git" the git directory). Empty when it lies outside the workspace.
std::string workspace_relative(const std::string& workspace, const std::string& base, std::string value) {
  if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
  if (value.empty() || value.front() == '~') return "";
  fs::path p = value.front() == '/' ? fs::path(value).lexically_relative(workspace)
                                     : (fs::path(base) / value).lexically_normal();
  std::string rel = p.lexically_normal().string();
  while (!rel.empty() && rel.back() == '/') rel.pop_back();
  if (rel.empty() || rel == "." || rel.starts_with("..")) return "";
  return rel;
}

}  // namespace

void protect_git_config_targets(const std::string& workspace, plan::ExecutionPlan& plan) {
  if (workspace.empty()) return;
  UniqueFd ws(::open(workspace.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
  if (!ws) return;
  auto fd = open_beneath(ws.get(), ".git/config", O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  struct stat st{};
  if (!fd || ::fstat(fd->get(), &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (1 << 20)) return;
  std::string text(static_cast<size_t>(st.st_size), '\0');
  ssize_t n = ::pread(fd->get(), text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  std::string section;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::string l = trim(line);
    if (l.empty() || l[0] == '#' || l[0] == ';') continue;
    std::string key, value;
    if (l[0] == '[') {
      auto end = l.find_first_of(" \"]");
      section = l.substr(1, end == std::string::npos ? std::string::npos : end - 1);
      std::transform(section.begin(), section.end(), section.begin(), ::tolower);
      // "[core] hooksPath = x" on one line is git syntax too.
      auto close = l.find(']');
      if (close == std::string::npos) continue;
      l = trim(l.substr(close + 1));
      if (l.empty()) continue;
    }
    auto eq = l.find('=');
    if (eq == std::string::npos) continue;
    key = trim(l.substr(0, eq));
    value = trim(l.substr(eq + 1));
    std::transform(key.begin(), key.end(), key.begin(), ::tolower);
    std::string rel, why;
    if (section == "core" && key == "hookspath") {
      rel = workspace_relative(workspace, "", value);
      why = "core.hooksPath in .git/config: git runs the hooks there";
    } else if ((section == "include" || section.starts_with("includeif")) && key == "path") {
      rel = workspace_relative(workspace, ".git", value);
      why = "included by .git/config";
    }
    if (rel.empty()) continue;
    auto e = policy::parse_protected_pattern(rel, "$.git_config");
    if (!e) continue;
    e->why = why;
    if (std::find(plan.protected_paths.begin(), plan.protected_paths.end(), *e) == plan.protected_paths.end())
      plan.protected_paths.push_back(std::move(*e));
  }
}

void apply_test_seams(plan::ExecutionPlan& plan) {
  const char* v = std::getenv("AIRLOCK_TEST_NO_PROTECTED_FIRST_WALL");
  if (v && std::string_view(v) == "1") {
    plan.protected_first_wall = false;
    plan.relaxations.push_back("protected paths: first wall off (test seam AIRLOCK_TEST_NO_PROTECTED_FIRST_WALL)");
  }
  const char* delay = std::getenv("AIRLOCK_TEST_GUEST_BOOT_DELAY_MS");
  auto* vm = std::get_if<plan::MicrovmTierPlan>(&plan.confinement);
  if (delay && vm) {
    vm->guest.test_boot_delay_ms = std::strtoull(delay, nullptr, 10);
    plan.relaxations.push_back(fmt::format("microvm: the guest says ready {} ms late (test seam AIRLOCK_TEST_GUEST_BOOT_DELAY_MS)",
                                           vm->guest.test_boot_delay_ms));
  }
}

Json ViewCopy::to_json() const {
  Json s = Json::array();
  for (const auto& k : skipped) s.push_back({{"path", k.path}, {"reason", k.reason}});
  return {{"files", files}, {"bytes", bytes}, {"skipped", s}, {"protected", protected_present}};
}

Result<ViewCopy> create_view(const std::string& workspace, const std::string& view, const ViewRules& rules) {
  const auto& paths = rules.paths;
  const auto& write_back_paths = rules.write_back_paths;
  ViewCopy out;
  if (workspace.empty()) {
    // No workspace: an empty view, with the write-back paths as empty directories.
    for (const auto& w : write_back_paths)
      if (w != ".") TRY(make_view_dirs(view, w));
    return out;
  }
  UniqueFd ws(::open(workspace.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
  if (!ws) return fail_errno(Code::IoError, "open workspace " + workspace, errno);
  UniqueFd vw(::open(view.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
  if (!vw) return fail_errno(Code::IoError, "open view " + view, errno);

  for (const auto& p : outermost(paths)) {
    if (p == ".") {
      for (const auto& child : list_names(ws.get()))
        TRY(copy_entry(ws.get(), vw.get(), child, child, rules, false, out));
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
        out.skipped.push_back({p, e == ELOOP ? "symlink on the way" : "not beneath the workspace"});
        continue;
      }
      missing = true;
    } else if (::fstatat(parent->get(), name_of(p).c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno != ENOENT) return fail_errno(Code::IoError, "stat " + p + " in the workspace", errno);
      missing = true;
    }
    if (missing) continue;  // a missing write-back path is made below
    TRY(make_view_dirs(view, parent_of(p)));
    auto vparent = TRY(open_beneath(vw.get(), parent_of(p), O_DIRECTORY | O_RDONLY));
    // A named path beneath a denied name or a protected path is judged as the walk would.
    bool denied = false, protect = false;
    for (std::string a = parent_of(p); a != "."; a = parent_of(a)) {
      denied = denied || policy::is_denied_name(rules.denied_names, name_of(a));
      protect = protect || policy::protected_by(rules.protected_paths, a, true).has_value();
    }
    if (denied) {
      out.skipped.push_back({p, "denied name"});
      continue;
    }
    if (protect) out.protected_present.push_back(p);
    TRY(copy_entry(parent->get(), vparent.get(), name_of(p), p, rules, protect, out));
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
  return {{"written", written},
          {"created_dirs", created_dirs},
          {"deleted", deleted},
          {"kept", kept},
          {"refused", refusals}};
}

Result<WriteBackReport> write_back(const std::string& view, const std::string& workspace,
                                   const ViewManifest& manifest, const ViewRules& rules) {
  const auto& write_back_paths = rules.write_back_paths;
  WriteBackReport rep;
  if (workspace.empty()) return rep;
  UniqueFd ws(::open(workspace.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
  if (!ws) return fail_errno(Code::IoError, "open workspace " + workspace, errno);
  UniqueFd vw(::open(view.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
  if (!vw) return fail_errno(Code::IoError, "open view " + view, errno);

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
  // Git directories that land whole or not at all: one with anything refused beneath it gets
  // nothing written or deleted beneath it (`rm -rf .git; git init` must not land a new HEAD and
  // drop the index while the old config stays).
  std::vector<std::string> held;
  auto hold = [&](const std::string& root) {
    if (root.empty() || under_any(root, held)) return;
    std::erase_if(held, [&](const std::string& x) { return under_any(x, {root}); });
    held.push_back(root);
  };
  auto refuse = [&](const std::string& rel, std::string why) {
    rep.refused.push_back({rel, std::move(why)});
    refused_prefixes.push_back(rel);
  };
  // The git directory a guard's refusal at `rel` holds: the one an allow-list entry matched, or
  // the repository-looking directory `git_dir` the walk is in.
  auto hold_git_dir = [&](const policy::ProtectedPath& guard, const std::string& rel, const std::string& git_dir) {
    if (guard.except.empty()) return;
    std::string root = policy::protected_root(guard, rel);
    hold(root.empty() || root == rel ? git_dir : root);
  };
  // `guard`: the protected path at or above this entry (nullopt: none). Beneath one, nothing is
  // ever applied: a new or changed entry is refused by name instead. `git_dir`: the nearest
  // directory above that git would take for a repository (HEAD and objects/ in it, whatever its
  // name: a bare repository planted in a subdirectory), whose allow-list then applies.
  std::function<Result<void>(int, const std::string&, const std::string&, std::optional<policy::ProtectedPath>,
                             const std::string&)>
      visit = [&](int dirfd, const std::string& name, const std::string& rel,
                  std::optional<policy::ProtectedPath> guard, const std::string& git_dir) -> Result<void> {
    struct stat st{};
    if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno == ENOENT) return {};
      return fail_errno(Code::IoError, "stat " + rel + " in the view", errno);
    }
    seen.push_back(rel);
    if (policy::is_denied_name(rules.denied_names, name)) {
      refuse(rel, "denied name");
      return {};
    }
    if (!guard) guard = policy::protected_by(rules.protected_paths, rel, S_ISDIR(st.st_mode));
    if (!guard && !git_dir.empty())
      guard = policy::protected_in_git_dir(rules.protected_paths, git_dir == "." ? rel : rel.substr(git_dir.size() + 1));
    if (std::string why = refusal_reason(st); !why.empty()) {
      refuse(rel, why);
      return {};
    }
    auto m = manifest.find(rel);
    if (S_ISDIR(st.st_mode)) {
      if (guard && m == manifest.end()) {
        refuse(rel, protected_reason(*guard));
        hold_git_dir(*guard, rel, git_dir);
        return {};
      }
      if (!guard) ops.push_back({rel, true, st.st_mode & 0777, st.st_ino});
      UniqueFd sub = TRY(open_subdir(dirfd, name, rel + " in the view"));
      std::string below = git_dir;
      if (git_dir.empty() && !in_dot_git(rel) && looks_like_git(sub.get())) {
        // A repository the workspace did not hold is being made: its config would be read by the
        // user's git in any directory beneath it. Never planted, in one run or over several.
        auto before = open_beneath(ws.get(), rel, O_DIRECTORY | O_RDONLY);
        if (!before || !looks_like_git(before->get())) {
          refuse(rel, "a new git directory (a HEAD with objects, refs or a commondir): no repository is planted");
          return {};
        }
        below = rel;
      }
      for (const auto& child : list_names(sub.get()))
        TRY(visit(sub.get(), child, rel + "/" + child, guard, below));
      return {};
    }
    ViewEntry now = entry_of(st);
    bool unchanged = m != manifest.end() && !m->second.is_dir && m->second.ino == now.ino &&
                     m->second.ctime_ns == now.ctime_ns && m->second.size == now.size;
    if (unchanged) return {};
    const bool existed = m != manifest.end() && !m->second.is_dir;
    const auto kept = policy::kept_by(rules.protected_paths, rel);
    if ((guard || kept) && existed && same_in_both(vw.get(), ws.get(), rel)) return {};  // rewritten as it was
    // A git directory's HEAD: a new one would plant a repository (its config read by the user's
    // git), a malformed one would cost the host its repository.
    std::string head_root;
    if (!guard && name == "HEAD" &&
        (policy::required_by(rules.protected_paths, rel, &head_root) ||
         (!git_dir.empty() && parent_of(rel) == git_dir && !(head_root = git_dir).empty()))) {
      if (!existed || !valid_head(vw.get(), rel)) {
        refuse(rel, existed ? "not a HEAD git reads (ref: refs/... or an object id)"
                            : "a new HEAD makes a git directory: no repository is planted");
        hold(head_root);
        return {};
      }
    }
    if (guard) {
      refuse(rel, protected_reason(*guard));
      hold_git_dir(*guard, rel, git_dir);
    } else if (kept && existed) {
      refuse(rel, "git object rewritten: an existing object or pack never changes");
      hold(*kept);
    } else {
      ops.push_back({rel, false, st.st_mode & 0777, st.st_ino});
    }
    return {};
  };
  for (const auto& p : outermost(write_back_paths)) {
    if (p == ".") {
      // The workspace itself may be made to look like a repository (a HEAD, objects/, config).
      const std::string root_git = looks_like_git(vw.get()) ? "." : "";
      if (!root_git.empty() && !looks_like_git(ws.get())) {
        refuse(".", "the workspace made a git directory (a HEAD with objects, refs or a commondir): no repository is "
                    "planted");
        hold(".");
        continue;
      }
      for (const auto& child : list_names(vw.get())) TRY(visit(vw.get(), child, child, std::nullopt, root_git));
      continue;
    }
    std::optional<policy::ProtectedPath> guard;
    bool denied = false;
    for (std::string a = parent_of(p); a != "." && !guard; a = parent_of(a)) {
      guard = policy::protected_by(rules.protected_paths, a, true);
      denied = denied || policy::is_denied_name(rules.denied_names, name_of(a));
    }
    if (denied) continue;  // never in the view, never written back
    auto vparent = open_beneath(vw.get(), parent_of(p), O_DIRECTORY | O_RDONLY);
    if (!vparent) {
      int e = vparent.error().facts.value("errno", 0);
      if (e == ENOENT) continue;  // gone from the view: the deletions below handle it
      refuse(p, e == ELOOP ? "symlink" : "conflict: " + vparent.error().message);
      continue;
    }
    TRY(visit(vparent->get(), name_of(p), p, guard, ""));
  }

  // Deletions: what the view had when made, under write-back paths, and no longer has, decided
  // before anything is applied. A directory goes whole or not at all: when a protected path
  // beneath one gone from the view cannot be deleted, nothing beneath it is (`mv sub elsewhere`),
  // and a git directory with a protected path deleted is held whole like any refused change
  // (`mv .git x` must not take HEAD and refs and leave config behind). Git objects are kept.
  std::sort(seen.begin(), seen.end());
  auto is_gone = [&](const std::string& rel) {
    return manifest.contains(rel) && under_any(rel, write_back_paths) &&
           !std::binary_search(seen.begin(), seen.end(), rel);
  };
  std::vector<std::string> gone, whole;
  for (const auto& [rel, entry] : manifest) {
    if (!is_gone(rel) || under_any(rel, refused_prefixes)) continue;
    auto guard = policy::protected_by(rules.protected_paths, rel, entry.is_dir);
    std::string git_root;
    if (!guard) {
      if (auto req = policy::required_by(rules.protected_paths, rel, &git_root)) {
        rep.refused.push_back({rel, fmt::format("a git directory cannot be without its {} ({}: deleted in the view)",
                                                name_of(rel), req->pattern)});
        hold(git_root);
        continue;
      }
      gone.push_back(rel);
      continue;
    }
    rep.refused.push_back({rel, protected_reason(*guard) + " (deleted in the view)"});
    std::string root = rel;
    for (std::string up = parent_of(rel); up != "." && is_gone(up); up = parent_of(up)) root = up;
    if (!guard->except.empty()) hold(policy::protected_root(*guard, rel));
    if (root != rel && !under_any(root, whole)) {
      std::erase_if(whole, [&](const std::string& x) { return under_any(x, {root}); });
      whole.push_back(root);
    }
  }
  for (const auto& k : whole)
    if (!under_any(k, held))
      rep.refused.push_back({k, "kept whole: a protected path beneath it was deleted in the view, so nothing "
                                "beneath it is deleted"});
  std::erase_if(gone, [&](const std::string& rel) {
    if (under_any(rel, whole) || under_any(rel, held)) return true;
    if (!policy::kept_by(rules.protected_paths, rel)) return false;
    rep.kept.push_back(rel);
    return true;
  });

  // Pass 2: apply, parents before children; every workspace path resolved beneath it.
  for (const auto& root : held)
    rep.refused.push_back({root, "kept whole: a change beneath this git directory was refused, so nothing beneath "
                                 "it is written or deleted"});
  for (const auto& op : ops) {
    if (under_any(op.rel, refused_prefixes) || under_any(op.rel, held)) continue;
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
        return fail_errno(Code::IoError, "mkdir " + op.rel + " in the workspace", errno);
      ::fchmodat(parent->get(), name.c_str(), op.mode, 0);  // exactly the view's bits, whatever the umask
      rep.created_dirs.push_back(op.rel);
      continue;
    }
    if (exists && !S_ISREG(cur.st_mode)) {
      rep.refused.push_back({op.rel, "conflict: the workspace has a non-regular file there"});
      refused_prefixes.push_back(op.rel);  // what the workspace holds beneath it stays
      continue;
    }
    // Re-checked on the open descriptor: should anything have swapped the entry since pass 1
    // (a fifo would block, a hard link or a device must not cross), it is refused, not read.
    UniqueFd in = TRY(open_beneath(vw.get(), op.rel, O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
    struct stat now{};
    if (::fstat(in.get(), &now) < 0) return fail_errno(Code::IoError, "stat " + op.rel + " in the view", errno);
    if (std::string why = refusal_reason(now); !why.empty() || now.st_ino != op.ino) {
      rep.refused.push_back({op.rel, why.empty() ? "changed during write-back" : why});
      continue;
    }
    std::string tmp = ".airlock-wb-" + random_id().substr(0, 12);
    UniqueFd out(::openat(parent->get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out) return fail_errno(Code::IoError, "create a temporary file for " + op.rel, errno);
    auto copied = copy_fd(in.get(), out.get(), op.rel);
    if (copied && ::fchmod(out.get(), op.mode) < 0) copied = fail_errno(Code::IoError, "chmod", errno);
    if (copied && ::renameat(parent->get(), tmp.c_str(), parent->get(), name.c_str()) < 0)
      copied = fail_errno(Code::IoError, "rename " + op.rel + " into the workspace", errno);
    if (!copied) {
      ::unlinkat(parent->get(), tmp.c_str(), 0);
      return std::unexpected(copied.error());
    }
    rep.written.push_back(op.rel);
  }

  std::sort(gone.rbegin(), gone.rend());  // children before parents
  for (const auto& rel : gone) {
    if (under_any(rel, refused_prefixes)) continue;  // a conflict in pass 2 keeps what lies beneath it
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
