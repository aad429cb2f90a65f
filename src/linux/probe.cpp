// The host probe: one measurement per fact, each made by trying the thing (a syscall or a child).
#include "linux/probe.h"

#include <fcntl.h>
#include <linux/filter.h>
#include <linux/kvm.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <span>

#include "base/child_process.h"
#include "base/fs.h"
#include "base/unique_fd.h"
#include "linux/cgroup.h"

// <linux/landlock.h> and <linux/seccomp.h> are not included: with -Isrc, <linux/X.h> finds this
// folder's own landlock.h and seccomp.h first. The few constants the probe needs are fixed
// kernel ABI, so they are spelled out here (444 is landlock_create_ruleset on every architecture).
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif

namespace airlock::linux {

namespace {

using plan::HostFacts;

// A probe child that has not finished by then is killed and the fact is false.
constexpr std::chrono::milliseconds kChildTimeout{2000};
constexpr unsigned kLandlockCreateRulesetVersion = 1U << 0;  // LANDLOCK_CREATE_RULESET_VERSION
constexpr unsigned kSeccompSetModeFilter = 1;                // SECCOMP_SET_MODE_FILTER
constexpr int kSeccompModeFilter = 2;                        // SECCOMP_MODE_FILTER
constexpr unsigned kSeccompRetAllow = 0x7fff0000U;           // SECCOMP_RET_ALLOW
// KVM's stable API version; anything else is a KVM this build does not speak.
constexpr int kKvmApiVersion = 12;

std::string errno_text(int e) {
  const char* name = strerrorname_np(e);
  return name ? fmt::format("{} ({})", name, std::strerror(e))
              : fmt::format("errno {} ({})", e, std::strerror(e));
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t p = s.find(sep, start);
    out.emplace_back(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos) break;
    start = p + 1;
  }
  return out;
}

std::vector<std::string> split_words(std::string_view s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n')) ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t' && s[j] != '\n') ++j;
    if (j > i) out.emplace_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::string join_notes(const std::vector<std::string>& notes, std::string_view sep = "; ") {
  std::string s;
  for (size_t i = 0; i < notes.size(); ++i) {
    if (i) s += sep;
    s += notes[i];
  }
  return s;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_octal(std::string_view s) {
  auto oct = [](char c) { return c >= '0' && c <= '7'; };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && s.size() - i >= 4 && oct(s[i + 1]) && oct(s[i + 2]) && oct(s[i + 3])) {
      out.push_back(static_cast<char>(((s[i + 1] - '0') << 6) | ((s[i + 2] - '0') << 3) | (s[i + 3] - '0')));
      i += 3;
      continue;
    }
    out.push_back(s[i]);
  }
  return out;
}

std::optional<std::string> read_trimmed(const std::string& path) {
  auto r = read_file(path);
  if (!r) return std::nullopt;
  return trim(std::move(*r));
}

// --- Probe children ------------------------------------------------------------------------------

// What a failing child sends its parent: which step failed and the errno it saw. Fixed size, one
// write() of less than PIPE_BUF, so it arrives whole or not at all.
struct ChildReport {
  int step = 0;  // 0: success; otherwise an index into the probe's step names
  int err = 0;   // 0 when the step failed without an errno (a value read back was wrong)
};

struct ChildOutcome {
  bool ok = false;
  int step = 0;        // the failed step, or -1 when the child never got to report one
  std::string reason;  // for people, when !ok
};

// A child that never reported a step (it could not start, timed out, died of a signal) says
// nothing lasting about the host: its fact is false for this probe, and the facts are marked so
// that nobody keeps them (exec::HostProbe's per-boot cache measures again next time).
void note_inconclusive(HostFacts& f, std::string_view fact, const ChildOutcome& out) {
  if (out.ok || out.step != -1) return;
  std::string& note = f.reasons[std::string(kProbeInconclusive)];
  note += fmt::format("{}{}: {}", note.empty() ? "" : "; ", fact, out.reason);
}

// A probe child that has been started and not yet collected. Destruction kills and reaps it.
struct PendingChild {
  std::optional<ChildProcess> child;
  UniqueFd report;                     // read end of the child's close-on-exec report pipe
  std::span<const char* const> steps;  // names of the body's steps, indexed by ChildReport::step
  std::string start_error;             // why no child runs, when `child` is empty
};

// Forks and runs `body` in the child; collect the outcome with finish_child(). `body` runs
// between fork and _exit in a copy of a possibly multi-threaded process, so it only makes
// syscalls on data prepared before fork: no allocation, no locks, no stdio. What it reads need
// only live until this returns: the child has its own copy.
template <typename Body>
void start_child(PendingChild& p, std::span<const char* const> steps, Body&& body) {
  p.steps = steps;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) < 0) {
    p.start_error = "pipe2: " + errno_text(errno);
    return;
  }
  UniqueFd rd(fds[0]), wr(fds[1]);
  pid_t pid = ::fork();
  if (pid < 0) {
    p.start_error = "fork: " + errno_text(errno);
    return;
  }
  if (pid == 0) {
    ChildReport r = body();
    if (r.step != 0) {
      ssize_t n = ::write(wr.get(), &r, sizeof r);
      (void)n;
      ::_exit(1);
    }
    ::_exit(0);
  }
  wr.reset();  // so the parent sees EOF once the child is gone
  auto pidfd = open_pidfd(pid);
  if (!pidfd) {
    // Still ours to reap: the pid cannot be recycled before we wait for it.
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    p.start_error = pidfd.error().message;
    return;
  }
  p.child.emplace(pid, std::move(*pidfd));
  p.report = std::move(rd);
}

// Waits for the child (killing it after kChildTimeout) and says how it went.
ChildOutcome finish_child(PendingChild& p) {
  if (!p.child) return {false, -1, p.start_error};
  auto st = p.child->wait_for(kChildTimeout);
  if (!st) return {false, -1, st.error().message};
  if (!*st) {
    p.child.reset();  // kills and reaps
    return {false, -1, fmt::format("the probe child did not finish within {} ms", kChildTimeout.count())};
  }
  const ExitStatus status = **st;
  ChildReport r;
  ssize_t n;
  do {
    n = ::read(p.report.get(), &r, sizeof r);
  } while (n < 0 && errno == EINTR);
  if (status.signaled) {
    const char* abbrev = sigabbrev_np(status.signal);
    return {
        false, -1,
        fmt::format("the probe child was killed by SIG{}", abbrev ? abbrev : std::to_string(status.signal))};
  }
  if (n == static_cast<ssize_t>(sizeof r) && r.step > 0 && static_cast<size_t>(r.step) < p.steps.size()) {
    std::string what = p.steps[static_cast<size_t>(r.step)];
    return {false, r.step, r.err ? fmt::format("{}: {}", what, errno_text(r.err)) : what};
  }
  if (status.code != 0) return {false, -1, fmt::format("the probe child exited with status {}", status.code)};
  return {true, 0, ""};
}

// Child-side helper: writes `len` bytes to a /proc file in one write(). Returns 0 or an errno.
int write_whole(const char* path, const char* data, size_t len) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t n = ::write(fd, data, len);
  int err = n < 0 ? errno : (static_cast<size_t>(n) != len ? EIO : 0);
  ::close(fd);
  return err;
}

// --- Kernel and identity -------------------------------------------------------------------------

void probe_identity(HostFacts& f) {
  struct utsname u {};
  if (::uname(&u) == 0) {
    f.kernel_release = u.release;
  } else {
    f.kernel_release = "unknown";
    f.reasons["kernel_release"] = "uname: " + errno_text(errno);
  }
  f.running_as_root = ::geteuid() == 0;
}

// --- Landlock ------------------------------------------------------------------------------------

void probe_landlock(HostFacts& f) {
  long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, kLandlockCreateRulesetVersion);
  if (abi > 0) {
    f.landlock_abi = static_cast<int>(abi);  // the real number, even above kLandlockAbiKnown
    return;
  }
  f.landlock_abi = 0;
  if (abi == 0) {
    f.reasons["landlock_abi"] = "landlock_create_ruleset reported ABI version 0";
    return;
  }
  const int e = errno;
  switch (e) {
    case ENOSYS:
      f.reasons["landlock_abi"] =
          "landlock_create_ruleset: ENOSYS: the kernel was built without Landlock "
          "(CONFIG_SECURITY_LANDLOCK) or is older than Linux 5.13, or a seccomp filter hides the syscall";
      break;
    case EOPNOTSUPP:
      f.reasons["landlock_abi"] =
          "landlock_create_ruleset: EOPNOTSUPP: Landlock is built in but disabled at boot "
          "(add \"landlock\" to the lsm= kernel parameter)";
      break;
    default:
      f.reasons["landlock_abi"] = "landlock_create_ruleset: " + errno_text(e);
  }
}

// --- seccomp and no_new_privs --------------------------------------------------------------------

enum SeccompStep { kSeccompOk, kSetNnp, kGetNnp, kGetSeccomp, kSetFilter, kReadBackFilter };

void start_seccomp_probe(PendingChild& p) {
  static constexpr const char* kSteps[] = {
      "ok",
      "prctl(PR_SET_NO_NEW_PRIVS)",
      "prctl(PR_GET_NO_NEW_PRIVS) did not read back 1",
      "prctl(PR_GET_SECCOMP) (the kernel may be built without CONFIG_SECCOMP)",
      ("seccomp(SECCOMP_SET_MODE_FILTER) with an allow-all filter "
       "(the kernel may be built without CONFIG_SECCOMP_FILTER)"),  // one step: clang asks for the parentheses
      "prctl(PR_GET_SECCOMP) did not read back SECCOMP_MODE_FILTER",
  };
  // The smallest filter there is: allow every syscall. It proves the kernel accepts and runs
  // filters without changing anything the child does before it exits.
  static sock_filter kAllowAll[] = {BPF_STMT(BPF_RET | BPF_K, kSeccompRetAllow)};
  static const sock_fprog kProg = {1, kAllowAll};

  start_child(p, kSteps, []() -> ChildReport {
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return {kSetNnp, errno};
    if (::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) return {kGetNnp, 0};
    if (::prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0) return {kGetSeccomp, errno};
    if (::syscall(SYS_seccomp, kSeccompSetModeFilter, 0, &kProg) != 0) {
      // Kernels before 3.17 have no seccomp(2); prctl() is the older door to the same thing.
      if (errno != ENOSYS || ::prctl(PR_SET_SECCOMP, kSeccompModeFilter, &kProg, 0, 0) != 0)
        return {kSetFilter, errno};
    }
    if (::prctl(PR_GET_SECCOMP, 0, 0, 0, 0) != kSeccompModeFilter) return {kReadBackFilter, 0};
    return {kSeccompOk, 0};
  });
}

void finish_seccomp_probe(HostFacts& f, PendingChild& p) {
  const ChildOutcome out = finish_child(p);
  f.no_new_privs = out.ok || out.step >= kGetSeccomp;
  f.seccomp_filter = out.ok;
  note_inconclusive(f, "seccomp_filter", out);
  if (!f.no_new_privs) f.reasons["no_new_privs"] = out.reason;
  if (!f.seccomp_filter) f.reasons["seccomp_filter"] = out.reason;
}

// --- User namespaces -----------------------------------------------------------------------------

// The host settings that commonly forbid unprivileged user namespaces, when they are set so.
std::string userns_settings_note() {
  std::vector<std::string> notes;
  if (auto v = read_trimmed("/proc/sys/user/max_user_namespaces"))
    notes.push_back(fmt::format("/proc/sys/user/max_user_namespaces is {}", *v));
  if (auto v = read_trimmed("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); v && *v != "0")
    notes.push_back(
        fmt::format("AppArmor restricts unprivileged user namespaces "
                    "(/proc/sys/kernel/apparmor_restrict_unprivileged_userns is {})",
                    *v));
  if (auto v = read_trimmed("/proc/sys/kernel/unprivileged_userns_clone"); v && *v == "0")
    notes.push_back("/proc/sys/kernel/unprivileged_userns_clone is 0");
  if (notes.empty()) return "";
  return " [" + join_notes(notes) + "]";
}

void start_user_namespaces_probe(PendingChild& p) {
  enum Step { kOk, kUnshare, kUidMap, kNotRoot };
  static constexpr const char* kSteps[] = {
      "ok",
      "unshare(CLONE_NEWUSER)",
      "writing /proc/self/uid_map in the new user namespace",
      "getuid() inside the namespace is not 0 after mapping",
  };
  // Map our own euid to root inside: the one mapping an unprivileged caller may write itself.
  const std::string uid_map = fmt::format("0 {} 1\n", ::geteuid());
  start_child(p, kSteps, [&]() -> ChildReport {
    if (::unshare(CLONE_NEWUSER) != 0) return {kUnshare, errno};
    if (int e = write_whole("/proc/self/uid_map", uid_map.data(), uid_map.size())) return {kUidMap, e};
    if (::getuid() != 0) return {kNotRoot, 0};
    return {kOk, 0};
  });
}

void finish_user_namespaces_probe(HostFacts& f, PendingChild& p) {
  const ChildOutcome out = finish_child(p);
  f.user_namespaces = out.ok;
  if (!out.ok) f.reasons["user_namespaces"] = out.reason + userns_settings_note();
  note_inconclusive(f, "user_namespaces", out);
}

// --- overlayfs inside a user namespace -----------------------------------------------------------

// The overlay probe's child and its temp dir. The dir is removed only after the child is reaped:
// until then its mounts may still sit on top of it.
class OverlayProbe {
 public:
  OverlayProbe() = default;
  OverlayProbe(const OverlayProbe&) = delete;
  OverlayProbe& operator=(const OverlayProbe&) = delete;
  ~OverlayProbe() { cleanup(); }

  void start();
  void finish(HostFacts& f);

 private:
  // Returns "" or why the directory could not be removed.
  std::string cleanup();

  std::string dir_;
  std::string setup_error_;
  PendingChild child_;
};

void OverlayProbe::start() {
  enum Step { kOk, kUnshare, kUidMap, kSetgroups, kGidMap, kPrivate, kTmpfs, kMkdir, kOverlay };
  static constexpr const char* kSteps[] = {
      "ok",
      "unshare(CLONE_NEWUSER | CLONE_NEWNS)",
      "writing /proc/self/uid_map",
      "writing \"deny\" to /proc/self/setgroups",
      "writing /proc/self/gid_map",
      "making mounts private (mount MS_REC | MS_PRIVATE on /)",
      "mounting a tmpfs in the user namespace",
      "making the overlay's directories in the tmpfs",
      "mounting overlayfs in the user namespace (needs Linux 5.11 or later)",
  };

  // Named with our pid, like the probe cgroups, so whoever checks for leftovers can tell ours apart.
  std::string tmpl = fmt::format("/tmp/{}{}-XXXXXX", kProbeTempPrefix, ::getpid());
  if (::mkdtemp(tmpl.data()) == nullptr) {
    setup_error_ = "could not make a probe directory under /tmp: " + errno_text(errno);
    return;
  }
  dir_ = tmpl;
  // Everything the child needs, made before fork.
  const std::string uid_map = fmt::format("0 {} 1\n", ::geteuid());
  const std::string gid_map = fmt::format("0 {} 1\n", ::getegid());
  const std::string lower = dir_ + "/lower", upper = dir_ + "/upper", work = dir_ + "/work",
                    merged = dir_ + "/merged";
  const std::string options = fmt::format("lowerdir={},upperdir={},workdir={}", lower, upper, work);
  const char* const subdirs[] = {lower.c_str(), upper.c_str(), work.c_str(), merged.c_str()};
  const char* const dir = dir_.c_str();

  // The mounts live only in the child's private mount namespace and vanish with it, so the
  // parent's directory stays empty and a plain rmdir cleans up.
  start_child(child_, kSteps, [&]() -> ChildReport {
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return {kUnshare, errno};
    if (int e = write_whole("/proc/self/uid_map", uid_map.data(), uid_map.size())) return {kUidMap, e};
    if (int e = write_whole("/proc/self/setgroups", "deny", 4)) return {kSetgroups, e};
    if (int e = write_whole("/proc/self/gid_map", gid_map.data(), gid_map.size())) return {kGidMap, e};
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return {kPrivate, errno};
    if (::mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0700") != 0)
      return {kTmpfs, errno};
    for (const char* d : subdirs)
      if (::mkdir(d, 0700) != 0) return {kMkdir, errno};
    if (::mount("overlay", merged.c_str(), "overlay", MS_NOSUID | MS_NODEV, options.c_str()) != 0)
      return {kOverlay, errno};
    return {kOk, 0};
  });
}

// Reads the outcome; `f.user_namespaces` must already be measured.
void OverlayProbe::finish(HostFacts& f) {
  const ChildOutcome out =
      setup_error_.empty() ? finish_child(child_) : ChildOutcome{false, -1, setup_error_};
  f.overlayfs_in_userns = out.ok;
  if (f.user_namespaces) note_inconclusive(f, "overlayfs_in_userns", out);
  if (!out.ok) {
    f.reasons["overlayfs_in_userns"] =
        f.user_namespaces ? out.reason
                          : "needs a user namespace, which this caller cannot create (see user_namespaces)";
  }
  if (std::string why = cleanup(); !why.empty()) f.reasons["probe_cleanup"] = why;
}

std::string OverlayProbe::cleanup() {
  child_.child.reset();  // kills and reaps a child not yet collected
  if (dir_.empty()) return "";
  std::string dir = std::exchange(dir_, "");
  if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return "";
  const int e = errno;
  // Only reachable if something outside this probe wrote into the directory.
  if (remove_tree(dir)) return "";
  return fmt::format("could not remove {}: {}", dir, errno_text(e));
}

// --- cgroups -------------------------------------------------------------------------------------

// Proves a cgroup directory is writable by us by making a uniquely named child and removing it.
// Returns "" on success, or why not.
std::string try_child_cgroup(const std::string& dir, HostFacts& f) {
  if (::access(dir.c_str(), W_OK) != 0)
    return fmt::format("{} is not writable by uid {}: {}", dir, ::geteuid(), errno_text(errno));
  static std::atomic<unsigned> counter{0};
  const std::string child = fmt::format("{}/{}{}-{}", dir, kProbeTempPrefix, ::getpid(), counter++);
  if (::mkdir(child.c_str(), 0755) != 0)
    return fmt::format("cannot make a child cgroup in {}: {}", dir, errno_text(errno));
  if (::rmdir(child.c_str()) != 0)
    f.reasons["probe_cleanup"] =
        fmt::format("could not remove probe cgroup {}: {}", child, errno_text(errno));
  return "";
}

void probe_cgroup_v2(HostFacts& f, const std::vector<MountInfoEntry>& mounts,
                     const std::vector<ProcCgroupEntry>& cgroups) {
  std::string why;
  auto dir = cgroup_v2_dir(mounts, cgroups, &why);
  if (!dir) {
    f.reasons["cgroup_v2_controllers"] = why;
    return;
  }
  auto text = read_file(*dir + "/cgroup.controllers");
  if (!text) {
    f.reasons["cgroup_v2_controllers"] = text.error().message;
    return;
  }
  const std::vector<std::string> available = split_words(*text);
  std::string writable_problem = try_child_cgroup(*dir, f);
  // Delegating means enabling controllers for children, through cgroup.subtree_control.
  if (writable_problem.empty() && ::access((*dir + "/cgroup.subtree_control").c_str(), W_OK) != 0)
    writable_problem = fmt::format("{}/cgroup.subtree_control is not writable by uid {}: {}", *dir,
                                   ::geteuid(), errno_text(errno));

  std::vector<std::string> notes;
  std::vector<std::string> missing;
  for (std::string_view c : kProbedControllers) {
    if (std::find(available.begin(), available.end(), c) == available.end()) {
      missing.emplace_back(c);
    } else if (writable_problem.empty()) {
      f.cgroup_v2_controllers.emplace_back(c);
    }
  }
  if (!missing.empty()) {
    std::string have = available.empty() ? "none" : join_notes(available, " ");
    for (auto& m : missing)
      notes.push_back(fmt::format("{}: not in {}/cgroup.controllers (available: {})", m, *dir, have));
  }
  if (!writable_problem.empty() && missing.size() < std::size(kProbedControllers))
    notes.push_back(writable_problem);
  if (!notes.empty()) f.reasons["cgroup_v2_controllers"] = join_notes(notes);
}

void probe_cgroup_v1(HostFacts& f, const std::vector<MountInfoEntry>& mounts,
                     const std::vector<ProcCgroupEntry>& cgroups) {
  std::vector<std::string> notes;
  bool delegated = false;
  for (std::string_view c : kProbedControllers) {
    std::string why;
    // cgroup_base decides where our cgroups go (our own, or the delegated directory), so the
    // probe measures the very directory prepare_sandbox_cgroup will write.
    auto base = cgroup_base(c, mounts, cgroups, &why);
    if (!base) {
      notes.push_back(fmt::format("{}: {}", c, why));
      continue;
    }
    std::string problem = try_child_cgroup(base->dir, f);
    if (problem.empty()) {
      f.cgroup_v1_writable.emplace_back(c);
      delegated = delegated || base->delegated;
    } else {
      if (!base->delegated)
        problem += fmt::format("; no delegated cgroup at {} owned by uid {}", delegated_cgroup_dir(c, ::geteuid()),
                               ::geteuid());
      notes.push_back(fmt::format("{}: {}", c, problem));
    }
  }
  if (delegated) f.cgroup_v1_base = delegated_cgroup_dir("<controller>", ::geteuid());
  if (!notes.empty()) f.reasons["cgroup_v1_writable"] = join_notes(notes);
}

// The command that gives this user a cgroup with memory, pids and cpu it may write: on a host
// with v1 hierarchies, root's `airlock setup delegate`; on cgroup2 alone, systemd's delegation
// to the user's manager, under which airlock then runs in a scope of its own.
std::string cgroup_fix_command(const std::vector<MountInfoEntry>& mounts) {
  const uid_t uid = ::geteuid();
  std::string user = std::to_string(uid);
  std::vector<char> buf(16384);
  struct passwd pw {}, *found = nullptr;
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found) user = found->pw_name;
  bool v1 = std::any_of(mounts.begin(), mounts.end(), [](const MountInfoEntry& m) {
    const auto opts = split(m.super_options, ',');
    return m.fstype == "cgroup" && std::find(opts.begin(), opts.end(), "memory") != opts.end();
  });
  if (v1) return "sudo airlock setup delegate " + user;
  return cgroup_v2_fix_command(uid);
}

void probe_cgroups(HostFacts& f) {
  auto mountinfo = read_file("/proc/self/mountinfo");
  auto proc_cgroup = read_file("/proc/self/cgroup");
  if (!mountinfo || !proc_cgroup) {
    const std::string why = !mountinfo ? mountinfo.error().message : proc_cgroup.error().message;
    f.reasons["cgroup_v2_controllers"] = why;
    f.reasons["cgroup_v1_writable"] = why;
    return;
  }
  const auto mounts = parse_mountinfo(*mountinfo);
  const auto cgroups = parse_proc_cgroup(*proc_cgroup);
  probe_cgroup_v2(f, mounts, cgroups);
  probe_cgroup_v1(f, mounts, cgroups);
  auto all = [](const std::vector<std::string>& have) {
    return std::all_of(std::begin(kProbedControllers), std::end(kProbedControllers), [&](std::string_view c) {
      return std::find(have.begin(), have.end(), c) != have.end();
    });
  };
  if (!all(f.cgroup_v2_controllers) && !all(f.cgroup_v1_writable)) f.cgroup_fix = cgroup_fix_command(mounts);
}

// --- KVM -----------------------------------------------------------------------------------------

void probe_kvm(HostFacts& f) {
  UniqueFd kvm(::open("/dev/kvm", O_RDWR | O_CLOEXEC));
  if (!kvm) {
    const int e = errno;
    if (e == ENOENT) {
      f.reasons["kvm_usable"] =
          "/dev/kvm does not exist (no KVM module loaded, or no hardware virtualization)";
    } else if (e == EACCES || e == EPERM) {
      struct stat st {};
      std::string owner = ::stat("/dev/kvm", &st) == 0
                              ? fmt::format(" (/dev/kvm is mode {:04o}, uid {}, gid {})", st.st_mode & 07777,
                                            st.st_uid, st.st_gid)
                              : "";
      f.reasons["kvm_usable"] = fmt::format("cannot open /dev/kvm read-write as uid {} gid {}: {}{}",
                                            ::geteuid(), ::getegid(), errno_text(e), owner);
    } else {
      f.reasons["kvm_usable"] = "cannot open /dev/kvm: " + errno_text(e);
    }
    return;
  }
  int version = ::ioctl(kvm.get(), KVM_GET_API_VERSION, 0);
  if (version != kKvmApiVersion) {
    f.reasons["kvm_usable"] =
        version < 0 ? "ioctl(KVM_GET_API_VERSION): " + errno_text(errno)
                    : fmt::format("KVM API version is {}, expected {}", version, kKvmApiVersion);
    return;
  }
  UniqueFd vm(::ioctl(kvm.get(), KVM_CREATE_VM, 0UL));
  if (!vm) {
    f.reasons["kvm_usable"] = "ioctl(KVM_CREATE_VM): " + errno_text(errno);
    return;
  }
  f.kvm_usable = true;
}

// Strips a mount's root from a cgroup path: the directory below the mount point, or nullopt
// when the cgroup lies outside what this mount shows.
std::optional<std::string> below_mount(const MountInfoEntry& m, const std::string& cgroup_path) {
  std::string rel;
  if (m.root == "/") {
    rel = cgroup_path;
  } else if (cgroup_path == m.root) {
    rel = "/";
  } else if (cgroup_path.starts_with(m.root + "/")) {
    rel = cgroup_path.substr(m.root.size());
  } else {
    return std::nullopt;
  }
  if (rel == "/") return m.mount_point;
  return m.mount_point == "/" ? rel : m.mount_point + rel;
}

}  // namespace

std::vector<MountInfoEntry> parse_mountinfo(std::string_view text) {
  std::vector<MountInfoEntry> out;
  for (const std::string& line : split(text, '\n')) {
    const auto fields = split_words(line);
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    auto dash = std::find(fields.begin() + std::min<size_t>(fields.size(), 6), fields.end(), "-");
    if (fields.size() < 6 || dash == fields.end() || fields.end() - dash < 3) continue;
    MountInfoEntry e;
    e.root = unescape_octal(fields[3]);
    e.mount_point = unescape_octal(fields[4]);
    e.fstype = *(dash + 1);
    e.super_options = dash + 3 < fields.end() ? *(dash + 3) : "";
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<ProcCgroupEntry> parse_proc_cgroup(std::string_view text) {
  std::vector<ProcCgroupEntry> out;
  for (const std::string& line : split(text, '\n')) {
    size_t a = line.find(':');
    if (a == std::string::npos) continue;
    size_t b = line.find(':', a + 1);
    if (b == std::string::npos) continue;
    ProcCgroupEntry e;
    e.hierarchy_id = line.substr(0, a);
    std::string list = line.substr(a + 1, b - a - 1);
    if (!list.empty()) e.controllers = split(list, ',');
    e.path = line.substr(b + 1);
    out.push_back(std::move(e));
  }
  return out;
}

std::optional<std::string> cgroup_v2_dir(const std::vector<MountInfoEntry>& mounts,
                                         const std::vector<ProcCgroupEntry>& cgroups, std::string* why) {
  auto say = [&](std::string s) {
    if (why) *why = std::move(s);
    return std::nullopt;
  };
  auto entry = std::find_if(cgroups.begin(), cgroups.end(), [](const ProcCgroupEntry& e) {
    return e.hierarchy_id == "0" && e.controllers.empty();
  });
  if (entry == cgroups.end()) return say("no cgroup v2 (\"0::\") entry in /proc/self/cgroup");
  bool any_mount = false;
  for (const auto& m : mounts) {
    if (m.fstype != "cgroup2") continue;
    any_mount = true;
    if (auto dir = below_mount(m, entry->path)) return dir;
  }
  if (!any_mount) return say("no cgroup2 filesystem in /proc/self/mountinfo");
  return say(fmt::format("our cgroup {} is outside every cgroup2 mount", entry->path));
}

std::optional<std::string> cgroup_v1_dir(std::string_view controller,
                                         const std::vector<MountInfoEntry>& mounts,
                                         const std::vector<ProcCgroupEntry>& cgroups, std::string* why) {
  auto say = [&](std::string s) {
    if (why) *why = std::move(s);
    return std::nullopt;
  };
  auto entry = std::find_if(cgroups.begin(), cgroups.end(), [&](const ProcCgroupEntry& e) {
    return std::find(e.controllers.begin(), e.controllers.end(), controller) != e.controllers.end();
  });
  if (entry == cgroups.end()) return say("no cgroup v1 hierarchy with this controller in /proc/self/cgroup");
  bool any_mount = false;
  for (const auto& m : mounts) {
    if (m.fstype != "cgroup") continue;
    const auto opts = split(m.super_options, ',');
    if (std::find(opts.begin(), opts.end(), controller) == opts.end()) continue;
    any_mount = true;
    if (auto dir = below_mount(m, entry->path)) return dir;
  }
  if (!any_mount) return say("no cgroup v1 filesystem mounted with this controller");
  return say(fmt::format("our cgroup {} is outside every mount of this hierarchy", entry->path));
}

HostFacts probe_host() { return probe_host(plan::FactNeeds::all()); }

HostFacts probe_host(const plan::FactNeeds& scope) {
  HostFacts f;
  probe_identity(f);
  // The probe children run at once while the parent measures what needs no child, so
  // the wall time is about the slowest child rather than the sum of all.
  PendingChild seccomp, userns;
  OverlayProbe overlay;
  start_seccomp_probe(seccomp);
  if (scope.user_namespaces) start_user_namespaces_probe(userns);
  if (scope.overlayfs) overlay.start();
  probe_landlock(f);
  constexpr const char* kNotMeasured = "not measured: no executor this policy may use needs it";
  if (scope.cgroups) {
    probe_cgroups(f);
  } else {
    f.reasons["cgroup_v2_controllers"] = kNotMeasured;
    f.reasons["cgroup_v1_writable"] = kNotMeasured;
  }
  if (scope.kvm) probe_kvm(f);
  else f.reasons["kvm_usable"] = kNotMeasured;
  finish_seccomp_probe(f, seccomp);
  if (scope.user_namespaces) finish_user_namespaces_probe(f, userns);
  else f.reasons["user_namespaces"] = kNotMeasured;
  if (scope.overlayfs) overlay.finish(f);  // after user_namespaces: its reason refers to that fact
  else f.reasons["overlayfs_in_userns"] = kNotMeasured;
  return f;
}

}  // namespace airlock::linux
