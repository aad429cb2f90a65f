// container_engine: Podman driven as a one-shot, airlock's image store and the container probe.
#include "exec/container_engine.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/fs.h"
#include "base/hash.h"
#include "base/unique_fd.h"
#include "exec/session_view.h"
#include "linux/cgroup.h"
#include "linux/seccomp.h"

namespace airlock::exec {
namespace {

constexpr const char* kEnginePath = "/usr/bin/podman";
constexpr size_t kMaxEngineOutput = 1u << 20;
// The image the probe tries each runtime with: the check program alone.
constexpr std::string_view kCheckImageName = "localhost/airlock-container-check";
constexpr std::string_view kChecksSchema = "airlock.container_checks.v1";

int64_t now_s() { return static_cast<int64_t>(::time(nullptr)); }

std::string self_dir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

// A directory that must be ours alone: made 0700 if absent, refused if a link, not a directory,
// not owned by our euid or open to others.
Result<void> own_private_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) < 0 && errno != EEXIST) return fail_errno(Code::ExecutorUnavailable, "mkdir " + path, errno);
  struct stat st {};
  if (::lstat(path.c_str(), &st) < 0) return fail_errno(Code::ExecutorUnavailable, "lstat " + path, errno);
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)
    return fail(Code::CustodyUnsafe,
                fmt::format("{} is not a private directory of this user (a link, another's, or open to others): "
                            "the container engine's run directory must be",
                            path),
                {{"path", path}});
  return {};
}

Result<UniqueFd> dev_null(int flags) {
  UniqueFd fd(::open("/dev/null", flags | O_CLOEXEC));
  if (!fd) return fail_errno(Code::ExecutorUnavailable, "open /dev/null", errno);
  return fd;
}

}  // namespace

std::vector<std::string> Engine::argv(std::vector<std::string> rest) const {
  // --tmpdir: the engine's own state of what runs (its exit files, its "alive" marker) in the run
  // directory too; as root it would be /run/libpod, shared with the host's own podman.
  std::vector<std::string> a = {program,          "--root",           storage,        "--runroot", run_root,
                                "--tmpdir",       run_root + "/libpod",
                                "--storage-driver", "overlay",        "--cgroup-manager", "cgroupfs",
                                "--events-backend", "none",           "--log-level",    "error"};
  a.insert(a.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
  return a;
}

std::vector<std::string> Engine::env() const {
  return {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + home, "XDG_RUNTIME_DIR=" + run_root + "/xdg",
          "CONTAINERS_CONF=" + conf, "LC_ALL=C"};
}

namespace {

// Rootless, the engine leaves a "pause" process holding its user namespace, for the next command
// with the same runtime directory. The last user of the engine ends it: found as this user's
// process whose environment names that directory and the engine's pause marker.
void kill_pause_process(const std::string& xdg) {
  if (::geteuid() == 0) return;
  const std::string want = "XDG_RUNTIME_DIR=" + xdg;
  DIR* d = ::opendir("/proc");
  if (!d) return;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == ::getpid()) continue;
    struct stat st {};
    if (::stat(("/proc/" + std::string(e->d_name)).c_str(), &st) < 0 || st.st_uid != ::geteuid()) continue;
    auto env = read_file("/proc/" + std::string(e->d_name) + "/environ");
    if (!env) continue;
    bool ours = false, pause = false;
    for (size_t pos = 0; pos < env->size();) {
      size_t nul = env->find('\0', pos);
      std::string_view var = std::string_view(*env).substr(pos, nul == std::string::npos ? std::string::npos : nul - pos);
      ours |= var == want;
      pause |= var == "_PODMAN_PAUSE=1";
      if (nul == std::string::npos) break;
      pos = nul + 1;
    }
    if (ours && pause) ::kill(static_cast<pid_t>(pid), SIGKILL);
  }
  ::closedir(d);
}

}  // namespace

Result<Engine> open_engine(const std::string& state_dir) {
  Engine e;
  e.program = kEnginePath;
  if (::access(e.program.c_str(), X_OK) < 0)
    return fail(Code::ExecutorUnavailable,
                fmt::format("{} is not installed (Debian's podman, with runc or crun; scripts/install-deps)", e.program),
                {{"engine", e.program}});
  e.state_dir = state_dir;
  const std::string base = state_dir + "/containers";
  TRY(make_dirs(base, 0700));
  e.storage = base + "/storage";
  e.home = base + "/home";
  e.conf = base + "/containers.conf";
  TRY(make_dirs(e.home, 0700));
  // The engine refuses a run root longer than 50 characters: a short directory of this user's,
  // one per state directory.
  const std::string tag = sha256_hex(state_dir).substr(0, 12);
  e.run_root = ::geteuid() == 0 ? fmt::format("/run/airlock-containers-{}", tag)
                                : fmt::format("/tmp/airlock-containers-{}-{}", ::geteuid(), tag);
  // The lease first: the last user of another engine of this state directory may be removing
  // the run directory, which it does holding the lock exclusively.
  UniqueFd lock(::open((base + "/lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!lock) return fail_errno(Code::ExecutorUnavailable, "open " + base + "/lock", errno);
  // The engine's database (storage/libpod/bolt_state.db) keeps the run and tmp directories it was
  // made with and then uses those, whatever it is told (or refuses another run directory): one made
  // by an older airlock (its tmpdir the host podman's /run/libpod) or for this state directory at
  // another path is removed while no one uses the engine and nothing is marked running. It holds no
  // image (the store has those) and no container airlock keeps.
  const std::string db_for = base + "/engine-db-for";
  if (read_file(db_for).value_or("") != e.run_root && ::flock(lock.get(), LOCK_EX | LOCK_NB) == 0) {
    bool marked = false;
    if (DIR* d = ::opendir((base + "/running").c_str())) {
      while (dirent* ent = ::readdir(d)) marked |= std::string_view(ent->d_name).starts_with("airlock-");
      ::closedir(d);
    }
    const std::string db = e.storage + "/libpod/bolt_state.db";
    if (!marked && (::unlink(db.c_str()) == 0 || errno == ENOENT)) TRY(write_file_atomic(db_for, e.run_root, 0600));
  }
  while (::flock(lock.get(), LOCK_SH) < 0)
    if (errno != EINTR) return fail_errno(Code::ExecutorUnavailable, "flock " + base + "/lock", errno);
  struct Lease {
    Lease(UniqueFd f, std::string r, std::string s) : fd(std::move(f)), run_root(std::move(r)), storage(std::move(s)) {}
    UniqueFd fd;
    std::string run_root, storage;
    ~Lease() {
      // Shared to exclusive is not atomic; whoever gets it first finds nothing running.
      if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) return;
      kill_pause_process(run_root + "/xdg");
      // As root the engine binds its overlay directory on itself (and mounts each container's
      // root below it) in this mount namespace: nothing of it stays mounted once no one uses it.
      // Rootless, those mounts lived in the pause process's namespace, gone with it.
      if (::geteuid() == 0) (void)::umount2((storage + "/overlay").c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
      (void)remove_tree(run_root);
    }
  };
  e.lease = std::make_shared<Lease>(std::move(lock), e.run_root, e.storage);
  TRY(own_private_dir(e.run_root));
  TRY(own_private_dir(e.run_root + "/xdg"));
  // No events log (nothing written outside the store), cgroupfs (no systemd), no logs kept of a
  // container's output: it goes to the caller only.
  constexpr std::string_view kConf =
      "# written by airlock: the container tier's engine settings\n"
      "[containers]\nlog_driver = \"none\"\n[engine]\nevents_logger = \"none\"\ncgroup_manager = \"cgroupfs\"\n";
  auto have = read_file(e.conf);
  if (!have || *have != kConf) TRY(write_file_atomic(e.conf, kConf, 0600));
  return e;
}

Result<ChildProcess> spawn_engine(const Engine& e, const std::vector<std::string>& args, int in, int out, int err,
                                  const std::vector<int>& cgroup_join_fds, const std::vector<int>& pass_fds) {
  std::vector<std::string> argv = e.argv(args);
  std::vector<std::string> env = e.env();
  std::vector<char*> av, ev;
  for (auto& a : argv) av.push_back(a.data());
  av.push_back(nullptr);
  for (auto& v : env) ev.push_back(v.data());
  ev.push_back(nullptr);
  int fds[3] = {in >= 0 ? in : 0, out >= 0 ? out : 1, err >= 0 ? err : 2};
  int pidfd = -1;
  // clone with CLONE_PIDFD: the child is held by a descriptor from its first instant.
  pid_t pid = static_cast<pid_t>(::syscall(SYS_clone, CLONE_PIDFD | SIGCHLD, nullptr, &pidfd, nullptr, nullptr));
  if (pid < 0) return fail_errno(Code::ExecutorUnavailable, "clone for the container engine", errno);
  if (pid == 0) {
    ::setpgid(0, 0);
    // The engine does not outlive airlock (its container is bounded by --timeout, and swept).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (int fd : cgroup_join_fds)
      if (linux::apply_cgroup(fd) != 0) ::_exit(125);
    // Moved above every target first, so a dup2 never overwrites a source still needed.
    const int n = 3 + static_cast<int>(pass_fds.size());
    int moved[16];
    if (n > 16) ::_exit(125);
    for (int i = 0; i < n; ++i) moved[i] = ::fcntl(i < 3 ? fds[i] : pass_fds[i - 3], F_DUPFD_CLOEXEC, n);
    for (int i = 0; i < n; ++i)
      if (moved[i] < 0 || ::dup2(moved[i], i) < 0) ::_exit(125);
    ::syscall(SYS_close_range, n, ~0U, 0);
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::execve(av[0], av.data(), ev.data());
    ::_exit(127);
  }
  return ChildProcess(pid, UniqueFd(pidfd));
}

namespace {

Result<EngineOutput> capture_engine(const Engine& e, const std::vector<std::string>& args,
                                    std::chrono::milliseconds limit, int input_fd, const std::vector<int>& join,
                                    const std::vector<int>& pass_fds = {}) {
  int op[2], ep[2];
  if (::pipe2(op, O_CLOEXEC) < 0) return fail_errno(Code::ExecutorUnavailable, "pipe", errno);
  UniqueFd out_r(op[0]), out_w(op[1]);
  if (::pipe2(ep, O_CLOEXEC) < 0) return fail_errno(Code::ExecutorUnavailable, "pipe", errno);
  UniqueFd err_r(ep[0]), err_w(ep[1]);
  UniqueFd null_in = TRY(dev_null(O_RDONLY));
  ChildProcess child =
      TRY(spawn_engine(e, args, input_fd >= 0 ? input_fd : null_in.get(), out_w.get(), err_w.get(), join, pass_fds));
  out_w.reset();
  err_w.reset();
  EngineOutput r;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  pollfd p[2] = {{out_r.get(), POLLIN, 0}, {err_r.get(), POLLIN, 0}};
  std::string* to[2] = {&r.out, &r.err};
  while (p[0].fd >= 0 || p[1].fd >= 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(-child.pid(), SIGKILL);
      return fail(Code::ExecutorUnavailable,
                  fmt::format("the container engine did not finish `{}` within {} s", fmt::join(args, " "),
                              limit.count() / 1000),
                  {{"engine", e.program}});
    }
    int n = ::poll(p, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n < 0 && errno != EINTR) return fail_errno(Code::ExecutorUnavailable, "poll", errno);
    for (int i = 0; i < 2; ++i) {
      if (p[i].fd < 0 || !p[i].revents) continue;
      char buf[16384];
      ssize_t got = ::read(p[i].fd, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        p[i].fd = -1;
        continue;
      }
      if (to[i]->size() < kMaxEngineOutput) to[i]->append(buf, std::min(static_cast<size_t>(got), kMaxEngineOutput - to[i]->size()));
    }
  }
  r.status = TRY(child.wait());
  return r;
}

}  // namespace

Result<EngineOutput> run_engine(const Engine& e, const std::vector<std::string>& args, std::chrono::milliseconds limit,
                                int input_fd) {
  return capture_engine(e, args, limit, input_fd, {});
}

Result<std::string> container_check_program() {
  std::string p = self_dir() + "/" + std::string(kContainerCheckProgram);
  if (::access(p.c_str(), X_OK) < 0)
    return fail(Code::ExecutorUnavailable, fmt::format("{} is not beside airlock ({})", kContainerCheckProgram, p),
                {{"program", p}});
  return p;
}

Result<Lifeline> make_lifeline() {
  Lifeline l;
  int life[2], report[2];
  if (::pipe2(life, O_CLOEXEC) < 0) return fail_errno(Code::ExecutorUnavailable, "pipe for the container's lifeline", errno);
  l.pass[0].reset(life[0]);
  l.keep.reset(life[1]);
  if (::pipe2(report, O_CLOEXEC | O_NONBLOCK) < 0)
    return fail_errno(Code::ExecutorUnavailable, "pipe for the container's exec report", errno);
  l.reports.reset(report[0]);
  l.pass[1].reset(report[1]);
  return l;
}

const Lifeline::Report& Lifeline::read_reports() {
  int32_t rec[2];
  for (;;) {
    ssize_t n = ::read(reports.get(), rec, sizeof rec);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EAGAIN: nothing more now; 0: the init's end closed
    bool dup = false;
    if (n != static_cast<ssize_t>(sizeof rec)) {
      said_.malformed = true;
    } else if (rec[0] == 1 && rec[1] > 0) {
      dup = said_.exec_errno.has_value();
      said_.exec_errno = rec[1];
    } else if (rec[0] == 2 && rec[1] > 0) {
      dup = said_.init_errno.has_value();
      said_.init_errno = rec[1];
    } else if ((rec[0] == 3 && rec[1] >= 0 && rec[1] <= 255) || (rec[0] == 4 && rec[1] > 0 && rec[1] < 65)) {
      dup = said_.ended.has_value();
      said_.ended = rec[0] == 3 ? ExitStatus{false, rec[1], 0} : ExitStatus{true, 0, rec[1]};
    } else {
      said_.malformed = true;
    }
    if (dup) said_.malformed = true;
  }
  return said_;
}

std::optional<bool> container_gone_from_store(const Engine& e, const std::string& name) {
  for (const std::string& dir : {e.storage, e.run_root})
    for (const char* file : {"containers.json", "volatile-containers.json"}) {
      const std::string path = dir + "/overlay-containers/" + file;
      if (::access(path.c_str(), F_OK) < 0 && errno == ENOENT) continue;
      auto text = read_file(path);
      if (!text) return std::nullopt;
      auto j = parse_json(*text, Code::IoError, path);
      if (!j || !j->is_array()) return std::nullopt;
      for (const auto& c : *j) {
        if (!c.is_object() || !c.contains("names") || !c["names"].is_array()) continue;
        for (const auto& n : c["names"])
          if (n.is_string() && n.get<std::string>() == name) return false;
      }
    }
  // No record anywhere is only proof when the store has its own file: a store we cannot find says nothing.
  if (::access((e.storage + "/overlay-containers/containers.json").c_str(), F_OK) < 0) return std::nullopt;
  return true;
}

Json ImageRecord::to_json() const {
  return {{"reference", reference}, {"image_id", image_id}, {"source", source}, {"built_at", built_at}};
}

namespace {

std::string images_file(const std::string& state_dir) { return state_dir + "/containers/images.json"; }

Result<std::vector<ImageRecord>> read_images(const std::string& state_dir) {
  std::vector<ImageRecord> out;
  auto text = read_file(images_file(state_dir));
  if (!text) return out;
  auto j = TRY(parse_json(*text, Code::IoError, images_file(state_dir)));
  if (!j.is_array()) return fail(Code::IoError, images_file(state_dir) + " is not an array of images");
  for (const auto& i : j) {
    if (!i.is_object() || !i.value("reference", Json()).is_string() || !i.value("image_id", Json()).is_string())
      return fail(Code::IoError, images_file(state_dir) + " holds an image record it cannot read");
    out.push_back({i["reference"].get<std::string>(), i["image_id"].get<std::string>(),
                   i.value("source", std::string()), i.value("built_at", int64_t{0})});
  }
  return out;
}

Result<void> write_images(const std::string& state_dir, const std::vector<ImageRecord>& images) {
  Json j = Json::array();
  for (const auto& i : images) j.push_back(i.to_json());
  return write_file_atomic(images_file(state_dir), j.dump(2) + "\n", 0600);
}

// The name as the engine stores it: a name without a registry part is "localhost/NAME".
Result<std::string> normalise_name(const std::string& name) {
  std::string n = name.find('/') == std::string::npos ? "localhost/" + name : name;
  // The policy's own reader decides what a name may be: parse it with a placeholder digest.
  TRY(policy::parse_image_ref(n + "@sha256:" + std::string(64, '0'), "NAME"));
  return n;
}

// Imports a tar stream of `dir` (owned by root, times at zero, name order) as NAME:airlock and
// returns {reference, image id}.
Result<std::pair<std::string, std::string>> import_dir(const Engine& e, const std::string& name, const std::string& dir,
                                                       const std::vector<std::string>& tar_extra = {}) {
  int tp[2];
  if (::pipe2(tp, O_CLOEXEC) < 0) return fail_errno(Code::ExecutorUnavailable, "pipe", errno);
  UniqueFd tar_r(tp[0]), tar_w(tp[1]);
  pid_t tar = ::fork();
  if (tar < 0) return fail_errno(Code::ExecutorUnavailable, "fork", errno);
  if (tar == 0) {
    ::dup2(tar_w.get(), 1);
    std::vector<std::string> args = {"/bin/tar", "--owner=0",  "--group=0", "--numeric-owner",
                                     "--sort=name", "--mtime=@0", "-C",        dir,
                                     "-c",        "."};
    args.insert(args.end(), tar_extra.begin(), tar_extra.end());
    std::vector<char*> av;
    for (auto& a : args) av.push_back(a.data());
    av.push_back(nullptr);
    ::execv(av[0], av.data());
    ::_exit(127);
  }
  tar_w.reset();
  auto imported = run_engine(e, {"import", "--quiet", "-", name + ":airlock"}, std::chrono::minutes(10), tar_r.get());
  tar_r.reset();
  int ws = 0;
  while (::waitpid(tar, &ws, 0) < 0 && errno == EINTR) {
  }
  auto r = TRY(std::move(imported));
  if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
    return fail(Code::OptionInvalid, fmt::format("tar could not read {} (exit {})", dir, WEXITSTATUS(ws)), {{"dir", dir}});
  if (!r.ok())
    return fail(Code::ExecutorUnavailable, fmt::format("{} import failed: {}", e.program, r.err), {{"engine", e.program}});
  auto inspected = TRY(run_engine(e, {"image", "inspect", "--format", "{{.Id}} {{.Digest}}", name + ":airlock"},
                                  std::chrono::seconds(60)));
  auto sp = inspected.out.find(' ');
  if (!inspected.ok() || sp == std::string::npos)
    return fail(Code::ExecutorUnavailable, fmt::format("{} image inspect failed: {}", e.program, inspected.err));
  std::string id = "sha256:" + inspected.out.substr(0, sp);
  std::string digest = inspected.out.substr(sp + 1);
  while (!digest.empty() && (digest.back() == '\n' || digest.back() == ' ')) digest.pop_back();
  std::string reference = TRY(policy::parse_image_ref(name + "@" + digest, "the engine's digest")).text();
  return std::pair{reference, id};
}

}  // namespace

Result<std::vector<ImageRecord>> list_images(const std::string& state_dir) { return read_images(state_dir); }

namespace {

Result<std::string> image_name(const std::string& name) {
  std::string n = TRY(normalise_name(name));
  if (n == kCheckImageName) return fail(Code::OptionInvalid, fmt::format("{} is airlock's own image's name", n));
  return n;
}

// `dir` imported as the image `n`, and recorded in images.json with where it came from.
Result<ImageRecord> import_and_record(const Engine& e, const std::string& n, const std::string& dir, std::string source) {
  auto [reference, id] = TRY(import_dir(e, n, dir));
  ImageRecord rec{reference, id, std::move(source), now_s()};
  auto images = TRY(read_images(e.state_dir));
  std::erase_if(images, [&](const ImageRecord& i) { return i.reference == rec.reference; });
  images.push_back(rec);
  TRY(write_images(e.state_dir, images));
  return rec;
}

// A Debian package name (Debian Policy 5.6.1).
bool debian_package_name(std::string_view name) {
  if (name.size() < 2 || !(std::islower(static_cast<unsigned char>(name[0])) || std::isdigit(static_cast<unsigned char>(name[0]))))
    return false;
  for (char c : name)
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '+' ||
          c == '-' || c == '.'))
      return false;
  return true;
}

}  // namespace

Result<ImageRecord> build_image_from_dir(const std::string& state_dir, const std::string& name, const std::string& dir) {
  std::string n = TRY(image_name(name));
  struct stat st {};
  if (dir.empty() || dir[0] != '/' || ::stat(dir.c_str(), &st) < 0 || !S_ISDIR(st.st_mode))
    return fail(Code::OptionInvalid, fmt::format("--from-dir {}: not an absolute path to a directory", dir), {{"dir", dir}});
  Engine e = TRY(open_engine(state_dir));
  return import_and_record(e, n, dir, "dir:" + dir);
}

Result<ImageRecord> build_image_from_debian(const std::string& state_dir, const std::string& name,
                                            const std::vector<std::string>& packages) {
  std::string n = TRY(image_name(name));
  if (packages.empty()) return fail(Code::OptionInvalid, "--from-debian names no package");
  for (const auto& p : packages)
    if (!debian_package_name(p))
      return fail(Code::OptionInvalid, fmt::format("--from-debian: {:?} is not a Debian package name", p),
                  {{"package", p}});
  Engine e = TRY(open_engine(state_dir));
  // Built on disk in the state directory (an image can be large), removed whatever happens.
  const std::string work = fmt::format("{}/containers/build-{}", state_dir, random_id().substr(0, 12));
  TRY(make_dirs(work + "/debs", 0700));
  struct Remove {
    std::string dir;
    ~Remove() { (void)remove_tree(dir); }
  } gone{work};
  std::string said;
  auto keep = [&](std::string_view line) {  // apt's last words, for an error
    said.append(line).append("\n");
    if (said.size() > 8192) said.erase(0, said.size() - 4096);
  };
  auto step_failed = [&](const Error& err, std::string what) {
    while (!said.empty() && said.back() == '\n') said.pop_back();
    auto last = said.rfind('\n');
    return Error{Code::ExecutorUnavailable,
                 fmt::format("--from-debian: {} ({}): {}", what, err.message,
                             last == std::string::npos ? said : said.substr(last + 1)),
                 {{"packages", packages}}};
  };
  // What apt would install on a machine with nothing installed: the packages and what they depend
  // on (Depends and Pre-Depends; one alternative each, conflicts honoured), no Recommends.
  std::vector<std::string> closure;
  std::vector<std::string> argv = {"apt-get", "--simulate", "--no-install-recommends", "--quiet",
                                   "-o", "Dir::State::status=/dev/null", "-o", "Debug::NoLocking=1", "install"};
  argv.insert(argv.end(), packages.begin(), packages.end());
  auto resolved = run_step(argv, work, -1, [&](std::string_view line) {
    keep(line);
    // "Inst NAME (VERSION SOURCES [ARCH])"
    if (!line.starts_with("Inst ")) return;
    line.remove_prefix(5);
    auto sp = line.find(' ');
    if (sp == std::string_view::npos || line.substr(sp, 2) != " (") return;
    std::string_view pkg = line.substr(0, sp), rest = line.substr(sp + 2);
    std::string_view version = rest.substr(0, rest.find(' '));
    if (debian_package_name(pkg) && !version.empty() && version.find_first_of("=/") == std::string_view::npos)
      closure.push_back(fmt::format("{}={}", pkg, version));
  });
  if (!resolved) {
    // apt's "Unable to locate package" (exit 100): a name this machine's sources do not have.
    Error err = step_failed(resolved.error(), "apt-get cannot resolve the packages");
    if (said.find("Unable to locate package") != std::string::npos || said.find("has no installation candidate") != std::string::npos)
      err.code = Code::OptionInvalid;
    return std::unexpected(err);
  }
  if (closure.empty()) return fail(Code::ExecutorUnavailable, "--from-debian: apt-get resolved no package to install");
  std::sort(closure.begin(), closure.end());
  said.clear();
  // Exactly the versions resolved, from this machine's sources.
  argv = {"apt-get", "download", "--quiet"};
  argv.insert(argv.end(), closure.begin(), closure.end());
  if (auto r = run_step(argv, work + "/debs", -1, keep); !r)
    return std::unexpected(step_failed(r.error(), "apt-get download failed"));
  // Each package's files unpacked into the root (no maintainer scripts run), in name order.
  std::vector<std::string> debs;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(work + "/debs", ec))
    if (f.path().extension() == ".deb") debs.push_back(f.path().filename().string());
  if (ec) return fail(Code::IoError, fmt::format("--from-debian: cannot list {}/debs: {}", work, ec.message()));
  std::sort(debs.begin(), debs.end());
  const std::string root = work + "/root";
  TRY(make_dirs(root, 0755));
  for (const auto& d : debs) {
    said.clear();
    if (auto r = run_step({"dpkg-deb", "--extract", work + "/debs/" + d, root}, work, -1, keep); !r)
      return std::unexpected(step_failed(r.error(), "dpkg-deb cannot unpack " + d));
  }
  // Where the container tier mounts: its view, its scratch, and the kernel's file systems.
  for (const char* m : {"work", "tmp", "proc", "dev", "sys", "etc"}) (void)::mkdir((root + "/" + m).c_str(), 0755);
  std::vector<std::string> unpacked;
  for (const auto& d : debs) unpacked.push_back(d.substr(0, d.size() - 4));
  return import_and_record(e, n, root, fmt::format("debian:{}", fmt::join(unpacked, " ")));
}

std::vector<std::string> container_run_args(const plan::ContainerTierPlan& tier, const plan::LimitsPlan& limits,
                                            const ContainerRun& run) {
  const plan::ContainerPlan& c = tier.container;
  // --rm: the engine removes the container as it ends (airlock checks it gone from the store).
  std::vector<std::string> a = {"run", "--rm", "--pull", "never", "--name", run.name, "--runtime", c.runtime,
                                "--network", "none", "--read-only", "--read-only-tmpfs=false",
                                "--cap-drop", "all", "--security-opt", "no-new-privileges",
                                "--security-opt", "seccomp=" + run.seccomp_file,
                                "--hostname", "airlock", "--no-hosts",
                                "--ipc", "private", "--pid", "private", "--uts", "private",
                                "--log-driver", "none",
                                "--workdir", run.workdir};
  // The plan's rlimits, as every tier has them: the engine sets each in the container.
  auto ulimit = [&](const char* name, uint64_t v) { a.push_back("--ulimit"); a.push_back(fmt::format("{}={}:{}", name, v, v)); };
  ulimit("nofile", limits.max_open_files);
  ulimit("core", 0);  // a core dump would write memory outside the view
  if (limits.cpu_seconds) ulimit("cpu", limits.cpu_seconds);
  // No RLIMIT_AS: the engine has no such ulimit; the memory cgroup binds the container as a whole.
  if (limits.max_file_bytes) ulimit("fsize", limits.max_file_bytes);
  // RLIMIT_NPROC counts every process of the container's uid on the host, so the plan's process
  // count cannot be it (the cgroup's pids.max binds the container). The engine's default would
  // raise it, which this process may not: ours, at most pid_max (no count can exceed it, and a
  // runtime here refuses more).
  rlimit nproc{};
  ::getrlimit(RLIMIT_NPROC, &nproc);
  uint64_t pid_max = 32768;
  if (auto t = read_file("/proc/sys/kernel/pid_max")) pid_max = std::strtoull(t->c_str(), nullptr, 10);
  ulimit("nproc", std::min<uint64_t>(nproc.rlim_max, pid_max));
  if (run.engine_limits) {
    const plan::CgroupPlan& cg = tier.cgroup;
    for (std::string v : {"--memory=" + std::to_string(cg.memory_bytes), "--memory-swap=" + std::to_string(cg.memory_bytes),
                          "--pids-limit=" + std::to_string(cg.pids_max), "--cpu-period=" + std::to_string(cg.cpu_period_us),
                          "--cpu-quota=" + std::to_string(cg.cpu_quota_us)})
      a.push_back(std::move(v));
  }
  if (run.engine_timeout_s) a.push_back(fmt::format("--timeout={}", run.engine_timeout_s));
  if (!run.view.empty()) {
    a.push_back("--volume");
    a.push_back(fmt::format("{}:{}:rw,nosuid,nodev", run.view, c.workdir));
  }
  a.push_back(run.scratch.empty() ? "--tmpfs" : "--volume");
  a.push_back(run.scratch.empty() ? fmt::format("/tmp:rw,nosuid,nodev,size={},mode=1777", c.tmp_bytes)
                                  : fmt::format("{}:/tmp:rw,nosuid,nodev", run.scratch));
  for (const auto& p : run.read_only) {
    a.push_back("--volume");
    a.push_back(fmt::format("{}:{}:ro,nosuid,nodev", p, p));
  }
  for (const auto& [host, inside] : run.extra_ro_binds) {
    a.push_back("--volume");
    a.push_back(fmt::format("{}:{}:ro,nosuid,nodev", host, inside));
  }
  if (!run.env_file.empty()) {
    a.push_back("--env-file");
    a.push_back(run.env_file);
  }
  if (!run.init_program.empty()) {
    // The init is the entrypoint whatever the image names; the command follows as its arguments.
    for (std::string s : {std::string("--volume"),
                          fmt::format("{}:{}:ro,nosuid,nodev", run.init_program, kContainerCheckInside),
                          std::string("--preserve-fds"), std::to_string(2 + (run.pass_fd ? 1 : 0) + run.joins),
                          std::string("--entrypoint"), std::string(kContainerCheckInside)})
      a.push_back(std::move(s));
  }
  if (!run.monitor_pidfile.empty()) {
    a.push_back("--conmon-pidfile");
    a.push_back(run.monitor_pidfile);
  }
  if (run.interactive) a.push_back("--interactive");
  a.push_back("--");
  a.push_back(c.image_id);
  if (!run.init_program.empty()) {
    a.push_back("--init");
    if (run.pass_fd) a.push_back("--pass");
    if (run.joins) {
      a.push_back("--join");
      a.push_back(std::to_string(run.joins));
    }
    a.push_back("--");
  }
  a.insert(a.end(), run.argv.begin(), run.argv.end());
  return a;
}

Result<void> write_env_file(const std::string& path, const std::vector<std::string>& env) {
  std::string text;
  for (const auto& kv : env) {
    if (kv.find('\n') != std::string::npos || kv.find('\0') != std::string::npos)
      return fail(Code::PolicyInvalid,
                  fmt::format("the variable {} holds a newline or a NUL, which the container tier cannot pass",
                              kv.substr(0, kv.find('='))),
                  {{"variable", kv.substr(0, kv.find('='))}});
    text += kv + "\n";
  }
  return write_file_atomic(path, text, 0600);
}

std::string running_marker(const Engine& e, const std::string& name) {
  return e.state_dir + "/containers/running/" + name;
}

std::string monitor_pidfile(const Engine& e, const std::string& name) {
  return e.state_dir + "/containers/monitors/" + name;
}

bool await_monitor(const Engine& e, const std::string& name, std::chrono::milliseconds limit) {
  const std::string file = monitor_pidfile(e, name);
  auto gone = [&] {
    ::unlink(file.c_str());
    return true;
  };
  auto text = read_file(file);
  if (!text) return gone();
  char* end = nullptr;
  long pid = std::strtol(text->c_str(), &end, 10);
  if (pid <= 1 || end == text->c_str()) return gone();
  auto pidfd = open_pidfd(static_cast<pid_t>(pid));
  if (!pidfd) return gone();
  // The pid names this run's monitor only while the process the descriptor holds still runs: its
  // command line (the engine's monitor, told to write this very file) is read, then the
  // descriptor asked whether it has ended since. A process with the pid now is not waited for.
  auto cmdline = read_file(fmt::format("/proc/{}/cmdline", pid));
  pollfd p{pidfd->get(), POLLIN, 0};
  const std::string told = std::string("\0--conmon-pidfile\0", 19) + file + '\0';
  if (::poll(&p, 1, 0) != 0 || !cmdline || !cmdline->starts_with("/usr/bin/conmon") ||
      cmdline->find(told) == std::string::npos)
    return gone();
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    int n = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (n > 0 || (n < 0 && errno != EINTR)) return gone();
    if (n == 0 && left.count() <= 0) return false;
  }
}

Result<void> mark_running(const Engine& e, const std::string& name) {
  TRY(make_dirs(e.state_dir + "/containers/monitors", 0700));
  TRY(make_dirs(e.state_dir + "/containers/running", 0700));
  UniqueFd fd(::open(running_marker(e, name).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return fail_errno(Code::ExecutorUnavailable, "record the container " + name, errno);
  return {};
}

void unmark_running(const Engine& e, const std::string& name) {
  // The container is gone; a monitor still there past the wait keeps its pid file for a later sweep.
  (void)await_monitor(e, name, std::chrono::seconds(60));
  ::unlink(running_marker(e, name).c_str());
}

void remove_abandoned_containers(const Engine& e, const std::string& except_session) {
  // Only what a run marked and never unmarked can be left: no engine command when nothing is.
  DIR* d = ::opendir((e.state_dir + "/containers/running").c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (dirent* ent = ::readdir(d))
    if (std::string_view(ent->d_name).starts_with("airlock-")) names.emplace_back(ent->d_name);
  ::closedir(d);
  for (const auto& name : names) {
    // airlock-SESSION-N
    auto dash = name.rfind('-');
    if (dash <= 8) continue;
    std::string session = name.substr(8, dash - 8);
    if (session == except_session || session.find('/') != std::string::npos) continue;
    if (live_session_owner(e.state_dir + "/sessions/" + session)) continue;
    auto removed = run_engine(e, {"rm", "--force", "--time", "0", "--ignore", name}, std::chrono::seconds(60));
    if (removed && removed->ok()) unmark_running(e, name);
  }
  // A monitor's pid file with no mark (a probe's check, or a monitor that outlived its run's
  // wait): removed once that monitor has ended, never waited for here.
  if (DIR* m = ::opendir((e.state_dir + "/containers/monitors").c_str())) {
    std::vector<std::string> left;
    while (dirent* ent = ::readdir(m))
      if (std::string_view(ent->d_name).starts_with("airlock-")) left.emplace_back(ent->d_name);
    ::closedir(m);
    for (const auto& name : left)
      if (::access(running_marker(e, name).c_str(), F_OK) != 0) (void)await_monitor(e, name, std::chrono::milliseconds(0));
  }
}

std::vector<std::pair<std::string, std::string>> cgroup_paths(const std::vector<std::string>& dirs) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string root = std::string(linux::kCgroupV1Root) + "/";
  for (const auto& d : dirs) {
    if (!d.starts_with(root)) continue;
    std::string rest = d.substr(root.size());
    bool v1 = false;
    for (std::string_view c : linux::kSandboxControllers)
      if (rest.starts_with(std::string(c) + "/")) {
        out.emplace_back(std::string(c), "/" + rest.substr(c.size() + 1));
        v1 = true;
      }
    if (!v1) out.emplace_back("", "/" + rest);  // cgroup2 at /sys/fs/cgroup
  }
  return out;
}

namespace {

// What the check printed, judged: every capability gone, no_new_privs, a seccomp filter, a
// read-only root, no network device besides loopback, and its memory and pids limits: as the
// engine set them (`limits`), or airlock's own cgroups (`ours`: controller -> path).
std::optional<std::string> judge_check(const std::string& out, const plan::CgroupPlan* limits,
                                       const std::vector<std::pair<std::string, std::string>>& ours) {
  std::map<std::string, std::string> kv;
  std::vector<std::string> cgroups;
  size_t pos = 0;
  bool ended = false;
  while (pos < out.size()) {
    size_t nl = out.find('\n', pos);
    std::string line = out.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? out.size() : nl + 1;
    if (line == "end") ended = true;
    auto sp = line.find(' ');
    if (sp == std::string::npos) continue;
    std::string k = line.substr(0, sp), v = line.substr(sp + 1);
    if (k == "cgroup") cgroups.push_back(v);
    else kv[k] = v;
  }
  if (!ended) return "the check did not finish: " + out.substr(0, 200);
  if (kv["CapEff"] != "0000000000000000" || kv["CapBnd"] != "0000000000000000")
    return fmt::format("capabilities remain (CapEff {}, CapBnd {})", kv["CapEff"], kv["CapBnd"]);
  if (kv["NoNewPrivs"] != "1") return "no_new_privs is not set";
  if (kv["Seccomp"] != "2") return "no seccomp filter is installed";
  if (kv["root_write"] != std::to_string(EROFS)) return "the root file system is writable (or failed otherwise: errno " + kv["root_write"] + ")";
  if (kv["net_devices_besides_lo"] != "0") return "the network has devices besides loopback (" + kv["net_devices_besides_lo"] + ")";
  if (limits) {
    // v1 files, else cgroup2's.
    std::string mem = kv.count("memory.limit_in_bytes") ? kv["memory.limit_in_bytes"] : kv["memory.max"];
    std::string pids = kv["pids.max"];
    if (mem != std::to_string(limits->memory_bytes) || pids != std::to_string(limits->pids_max))
      return fmt::format("the container's cgroup limits are not what the engine was asked for (memory {} of {}, pids "
                         "{} of {})",
                         mem, limits->memory_bytes, pids, limits->pids_max);
    return std::nullopt;
  }
  for (const auto& [controller, rel] : ours) {
    if (controller == "cpu") continue;
    bool below = false;
    for (const auto& line : cgroups) {
      // "N:CONTROLLERS:PATH" (v1) or "0::PATH" (v2).
      auto a = line.find(':'), b = line.find(':', a + 1);
      if (a == std::string::npos || b == std::string::npos) continue;
      std::string ctl = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
      bool names = controller.empty() ? ctl.empty() : ("," + ctl + ",").find("," + controller + ",") != std::string::npos;
      if (names && (path == rel || path.starts_with(rel + "/"))) below = true;
    }
    if (!below) return fmt::format("the container is not in airlock's {} cgroup {}", controller.empty() ? "cgroup2" : controller, rel);
  }
  return std::nullopt;
}

struct CheckResult {
  bool ok = false;
  std::string reason;
  bool engine_failed = false;  // the runtime could not start a container at all
};

// Runs the check program inside `image_id` under the tier's confinement, below a cgroup of its own.
CheckResult run_check(const Engine& e, const plan::HostFacts& f, const std::string& runtime, bool rootless,
                      const std::string& image_id, const std::string& check_program) {
  CheckResult r;
  plan::ContainerTierPlan tier;
  tier.container = {e.program, runtime, rootless, "", image_id, "/work", 1u << 20};
  tier.cgroup.version = f.cgroup_v2_controllers.size() >= 3 ? 2 : 1;  // as plan's cgroup_version
  tier.cgroup.controllers = {"memory", "pids", "cpu"};
  tier.cgroup.memory_bytes = 256u << 20;
  tier.cgroup.pids_max = 64;
  tier.cgroup.cpu_quota_us = tier.cgroup.cpu_period_us;
  tier.seccomp.deny_namespace_clone = true;
  tier.seccomp.denied_syscalls = {"ptrace"};
  const std::string name = "airlock-check-" + random_id().substr(0, 12);
  if (auto made = make_dirs(e.state_dir + "/containers/monitors", 0700); !made) {
    r.reason = made.error().message;
    return r;
  }
  // Rootless, the container runs in airlock's cgroup; as root the engine makes its own with the limits.
  std::optional<linux::PreparedCgroup> cg;
  std::vector<std::pair<std::string, std::string>> ours;
  if (rootless) {
    auto made = linux::prepare_sandbox_cgroup(tier.cgroup, name);
    if (!made) {
      r.reason = "no cgroup for the check: " + made.error().message;
      return r;
    }
    cg = std::move(*made);
    std::vector<std::string> dirs;
    for (const auto& d : cg->dirs) dirs.push_back(d.path());
    ours = cgroup_paths(dirs);
  }
  auto seccomp = linux::oci_seccomp_profile(tier.seccomp);
  const std::string profile = e.run_root + "/" + name + ".seccomp.json";
  if (!seccomp || !write_file_atomic(profile, seccomp->profile.dump(), 0600)) {
    r.reason = "the seccomp profile could not be written";
    return r;
  }
  ContainerRun run;
  run.name = name;
  run.workdir = "/";
  run.seccomp_file = profile;
  run.engine_limits = !rootless;
  // The check runs under itself as init, as every command does: what a run depends on (its
  // descriptors passed in, its init's lifeline) is measured too.
  run.init_program = check_program;
  run.argv = {std::string(kContainerCheckInside)};
  run.engine_timeout_s = 120;
  run.monitor_pidfile = monitor_pidfile(e, name);
  plan::LimitsPlan limits;
  std::vector<int> join;
  if (cg)
    for (const auto& fd : cg->procs) join.push_back(fd.get());
  auto lifeline = make_lifeline();
  if (!lifeline) {
    r.reason = lifeline.error().message;
    return r;
  }
  // Rootless, the init joins the container to airlock's cgroup, as for every run.
  std::vector<int> pass = lifeline->pass_fds();
  pass.insert(pass.end(), join.begin(), join.end());
  run.joins = static_cast<int>(join.size());
  auto out = capture_engine(e, container_run_args(tier, limits, run), std::chrono::seconds(120), -1, {}, pass);
  (void)run_engine(e, {"rm", "--force", "--time", "0", "--ignore", name}, std::chrono::seconds(60));
  await_monitor(e, name, std::chrono::seconds(60));
  ::unlink(profile.c_str());
  if (cg) (void)cg->release();
  if (!out) {
    r.reason = out.error().message;
    r.engine_failed = true;
    return r;
  }
  if (!out->ok()) {
    std::string err = out->err.substr(0, 300);
    while (!err.empty() && err.back() == '\n') err.pop_back();
    r.reason = fmt::format("the container did not run (engine exit {}): {}", out->status.shell_status(), err);
    r.engine_failed = out->status.code >= 125;
    return r;
  }
  if (auto bad = judge_check(out->out, rootless ? nullptr : &tier.cgroup, ours)) {
    r.reason = *bad;
    return r;
  }
  r.ok = true;
  r.reason = fmt::format("the check ran in it ({}) with no capabilities, no_new_privs, seccomp, a read-only root, no "
                         "network and its memory and pids limits ({})",
                         runtime, rootless ? "airlock's cgroup" : "set by the engine");
  return r;
}

std::string checks_file(const std::string& state_dir) { return state_dir + "/containers/checks.json"; }

// What a kept check depends on besides the image: the boot, the engine's and runtimes' files, the user.
Json checks_key(const Engine& e) {
  auto stat_of = [](const char* p) -> Json {
    struct stat st {};
    if (::stat(p, &st) < 0) return nullptr;
    return Json::array({static_cast<uint64_t>(st.st_ino), static_cast<int64_t>(st.st_mtime), static_cast<int64_t>(st.st_size)});
  };
  auto boot = read_file("/proc/sys/kernel/random/boot_id");
  return {{"boot_id", boot ? *boot : std::string()},
          {"engine", stat_of(e.program.c_str())},
          {"crun", stat_of("/usr/bin/crun")},
          {"runc", stat_of("/usr/sbin/runc")},
          {"euid", ::geteuid()},
          {"check", stat_of((self_dir() + "/" + std::string(kContainerCheckProgram)).c_str())}};
}

}  // namespace

void probe_container(plan::HostFacts& f, const std::string& state_dir, bool fresh) {
  f.container = {};
  auto why = [&](std::string reason) { f.reasons["container"] = std::move(reason); };
  auto engine = open_engine(state_dir);
  if (!engine) return why(engine.error().message);
  const Engine& e = *engine;
  auto check_program = container_check_program();
  if (!check_program) return why(check_program.error().message);
  const std::string& check = *check_program;
  const bool rootless = ::geteuid() != 0;
  if (!f.has_cgroup_controller("memory") || !f.has_cgroup_controller("pids"))
    return why("no cgroup we may write has memory and pids, which a container runs below");

  const Json key = checks_key(e);
  Json kept;
  if (auto text = read_file(checks_file(state_dir)))
    if (auto j = parse_json(*text, Code::IoError, "checks"); j && j->is_object() && j->value("schema", "") == kChecksSchema &&
                                                             j->value("key", Json()) == key)
      kept = *j;
  const int64_t now = now_s();
  auto is_fresh = [&](const Json& row) {
    return !fresh && row.is_object() && row.value("checked_at", int64_t{0}) + kContainerCheckMaxAgeSeconds > now &&
           row.value("checked_at", int64_t{0}) <= now;
  };

  // The engine and its runtime: airlock's check image, run with crun, else runc.
  Json engine_row = kept.is_object() ? kept.value("engine", Json()) : Json();
  if (!is_fresh(engine_row) || !engine_row.value("ok", false)) {
    engine_row = {{"checked_at", now}, {"ok", false}};
    auto version = run_engine(e, {"version", "--format", "{{.Client.Version}}"}, std::chrono::seconds(60));
    std::string v = version && version->ok() ? version->out : std::string();
    while (!v.empty() && v.back() == '\n') v.pop_back();
    engine_row["version"] = v;
    // The check image: the check program alone, in a directory of its own.
    std::string dir = e.run_root + "/check-image-" + random_id().substr(0, 12);
    (void)remove_tree(dir);
    std::string image_id, failure;
    if (auto made = make_dirs(dir, 0700); !made) failure = made.error().message;
    else if (auto copied = read_file(check); !copied) failure = copied.error().message;
    else if (auto w = write_file_atomic(dir + "/" + std::string(kContainerCheckProgram), *copied, 0755); !w) failure = w.error().message;
    else if (auto imported = import_dir(e, std::string(kCheckImageName), dir); !imported) failure = imported.error().message;
    else image_id = imported->second;
    (void)remove_tree(dir);
    std::vector<std::string> tried;
    if (!image_id.empty())
      for (const char* runtime : {"crun", "runc"}) {
        CheckResult r = run_check(e, f, runtime, rootless, image_id, check);
        if (r.ok) {
          engine_row["ok"] = true;
          engine_row["runtime"] = runtime;
          break;
        }
        tried.push_back(fmt::format("{}: {}", runtime, r.reason));
      }
    engine_row["reason"] = failure.empty() ? fmt::format("{}", fmt::join(tried, "; ")) : failure;
  }
  Json images_kept = kept.is_object() && kept.value("images", Json()).is_object() ? kept["images"] : Json::object();
  Json out = {{"schema", kChecksSchema}, {"key", key}, {"engine", engine_row}, {"images", Json::object()}};
  if (!engine_row.value("ok", false)) {
    (void)write_file_atomic(checks_file(state_dir), out.dump(2) + "\n", 0600);
    return why(fmt::format("{} could not run a container here: {}", e.program, engine_row.value("reason", "")));
  }
  f.container.engine = e.program;
  f.container.version = engine_row.value("version", "");
  f.container.runtime = engine_row.value("runtime", "");
  f.container.rootless = rootless;

  auto images = list_images(state_dir);
  if (!images) {
    why(images.error().message);
    images = std::vector<ImageRecord>{};
  }
  for (const auto& img : *images) {
    Json row = images_kept.value(img.reference, Json());
    if (!is_fresh(row) || row.value("image_id", "") != img.image_id) {
      plan::ContainerImageFact fact{img.reference, img.image_id, false, "", now};
      // The engine must still hold these bytes under this name: its digest, then its content id.
      auto inspected = run_engine(e, {"image", "inspect", "--format", "{{.Id}}", img.reference}, std::chrono::seconds(60));
      std::string id = inspected && inspected->ok() ? "sha256:" + inspected->out : std::string();
      while (!id.empty() && id.back() == '\n') id.pop_back();
      if (id != img.image_id) {
        fact.reason = fmt::format("the engine's store does not hold {} as {} (found {})", img.reference, img.image_id,
                                  id.empty() ? "nothing" : id);
      } else {
        CheckResult r = run_check(e, f, f.container.runtime, rootless, img.image_id, check);
        fact.ok = r.ok;
        fact.reason = r.reason;
      }
      row = {{"image_id", fact.image_id}, {"ok", fact.ok}, {"reason", fact.reason}, {"checked_at", fact.checked_at}};
    }
    out["images"][img.reference] = row;
    f.container.images.push_back({img.reference, row.value("image_id", ""), row.value("ok", false),
                                  row.value("reason", ""), row.value("checked_at", int64_t{0})});
  }
  (void)write_file_atomic(checks_file(state_dir), out.dump(2) + "\n", 0600);
}

}  // namespace airlock::exec
