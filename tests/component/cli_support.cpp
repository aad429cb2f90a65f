// Test support: temp dirs, the airlock binary run as a chosen identity, file helpers.
#include "cli_support.h"

#include "exec/session_view.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace airlock::testing {
namespace fs = std::filesystem;
constexpr uid_t kNobody = 65534;

std::string to_string(Identity id) { return id == Identity::Self ? "self" : "nobody"; }

bool require_all_tiers() {
  const char* v = std::getenv("AIRLOCK_REQUIRE_ALL_TIERS");
  return v && std::string(v) == "1";
}

bool identity_available(Identity id, std::string* why) {
  if (id == Identity::Self) return true;
  if (::geteuid() != 0) {
    *why = "switching to an unprivileged user needs root; this run is already unprivileged";
    return false;
  }
  return true;
}

TempDir::TempDir(std::optional<uid_t> owner, const std::string& base) {
  std::string tmpl = base + "/airlock-test.XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
  ::chmod(path_.c_str(), 0755);
  if (owner) (void)!::chown(path_.c_str(), *owner, *owner);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<nlohmann::json> read_receipts(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

bool exists(const std::string& path) {
  struct stat st{};
  return ::lstat(path.c_str(), &st) == 0;
}

namespace {

// Our own cgroup directory in the v1 hierarchy of `controller` (empty when there is none).
std::string own_v1_dir(const std::string& controller) {
  std::string mount = "/sys/fs/cgroup/" + controller;
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string ctrls = "," + line.substr(a + 1, b - a - 1) + ",";
    if (ctrls.find("," + controller + ",") != std::string::npos) {
      std::string path = line.substr(b + 1);
      return exists(mount) ? mount + (path == "/" ? "" : path) : "";
    }
  }
  return "";
}

}  // namespace

CliFixture::~CliFixture() {
  // What an airlock the test killed left (its session's view, the cgroups of its sandbox, running
  // or built ahead) is swept as the next airlock on this state directory would sweep it.
  (void)exec::sweep_abandoned_sessions(state_);
  for (const auto& d : delegated_) {
    // Whatever airlock made inside is removed by airlock; remove our directory itself.
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec))
      if (e.is_directory()) ::rmdir(e.path().c_str());
    ::rmdir(d.c_str());
  }
}

CliFixture::CliFixture(Identity id) : id_(id), root_() {
  uid_t owner = uid();
  if (id_ == Identity::Nobody && ::geteuid() == 0 && std::getenv("AIRLOCK_TEST_NO_DELEGATION") == nullptr) {
    for (const char* c : {"memory", "pids", "cpu"}) {
      std::string base = own_v1_dir(c);
      if (base.empty()) continue;
      std::string d = base + "/" + fs::path(root_.path()).filename().string();
      if (::mkdir(d.c_str(), 0755) != 0) continue;
      (void)!::chown(d.c_str(), kNobody, kNobody);
      for (const char* f : {"cgroup.procs", "tasks"}) (void)!::chown((d + "/" + f).c_str(), kNobody, kNobody);
      delegated_.push_back(d);
    }
  }
  // A copy of the binary, and of airlock-serve and airlock-probe (the escape suite's probes) beside
  // it, in a directory every identity can traverse.
  binary_ = root_ / "airlock";
  fs::copy_file(AIRLOCK_BINARY, binary_);
  ::chmod(binary_.c_str(), 0755);
  for (const char* sibling : {"airlock-serve", "airlock-probe", "airlock-container-check"}) {
    fs::path from = fs::path(AIRLOCK_BINARY).parent_path() / sibling;
    if (!fs::exists(from)) continue;
    fs::copy_file(from, root_ / sibling);
    ::chmod((root_ / sibling).c_str(), 0755);
  }
  workspace_ = root_ / "workspace";
  state_ = root_ / "state";
  for (const auto& d : {workspace_, state_}) {
    ::mkdir(d.c_str(), 0700);
    (void)!::chown(d.c_str(), owner, owner);
  }
}

uid_t CliFixture::uid() const { return id_ == Identity::Nobody ? kNobody : ::geteuid(); }

std::string CliFixture::write_policy(const std::string& json, const std::string& name) {
  std::string p = root_ / name;
  std::ofstream(p) << json;
  ::chmod(p.c_str(), 0644);
  return p;
}

void CliFixture::put(const std::string& rel, const std::string& content) {
  fs::path p = fs::path(workspace_) / rel;
  fs::create_directories(p.parent_path());
  std::ofstream(p) << content;
  for (fs::path q = p; q.string().size() > workspace_.size(); q = q.parent_path())
    (void)!::chown(q.c_str(), uid(), uid());
}

size_t CliFixture::session_dirs() const {
  size_t n = 0;
  std::error_code ec;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(state_ + "/sessions", ec)) ++n;
  return n;
}

std::vector<std::string> CliFixture::receipts() const {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(state_ + "/receipts", ec)) out.push_back(e.path().string());
  return out;
}

CliResult CliFixture::run(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                          int timeout_seconds, void (*on_start)(pid_t)) {
  std::vector<std::string> argv = {binary_, "--state-dir", state_};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv, "", env, timeout_seconds, on_start);
}

std::vector<ProcessInfo> live_processes() {
  std::vector<ProcessInfo> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = read_text(e.path().string() + "/cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    std::string stat = read_text(e.path().string() + "/stat");
    auto close = stat.rfind(')');
    bool zombie = close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
    if (!zombie) out.push_back({std::stoi(pid), std::move(cmd)});
  }
  return out;
}

bool CliFixture::adopt_vm_verification(std::string* why) {
  const char* cache = std::getenv("AIRLOCK_CACHE_DIR");
  if (!cache) {
    *why = "AIRLOCK_CACHE_DIR is not set (CTest sets it for the vm_image and vm_verified fixtures)";
    return false;
  }
  std::string from = std::string(cache) + "/verify/vm-verified.json";
  std::string record = read_text(from);
  if (record.empty()) {
    *why = "`airlock vm verify` did not pass here: no " + from + " (see the vm_verify test's output)";
    return false;
  }
  std::string to = state_ + "/vm-verified.json";
  std::ofstream(to) << record;
  (void)!::chown(to.c_str(), uid(), static_cast<gid_t>(-1));
  return true;
}

std::string CliFixture::use_usr_image(nlohmann::json& policy) {
  TempDir dir(uid());
  for (const char* d : {"usr", "etc", "tmp", "work", "proc", "dev", "sys"}) ::mkdir((dir / d).c_str(), 0755);
  for (const char* l : {"bin", "sbin", "lib", "lib64"})
    (void)!::symlink((std::string("usr/") + l).c_str(), (dir / l).c_str());
  auto r = run({"image", "build", "localhost/airlock-test-usr", "--from-dir", dir.path(), "--json"}, {}, 300);
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  if (r.status != 0 || !j.is_object() || !j.contains("reference"))
    return "airlock image build: exit " + std::to_string(r.status) + ": " + r.err.substr(0, 600);
  policy["image"] = j["reference"];
  if (!policy.contains("read_only_paths")) policy["read_only_paths"] = nlohmann::json::array();
  policy["read_only_paths"].push_back("/usr");
  return "";
}

pid_t CliFixture::launch(std::vector<std::string> argv, const std::map<std::string, std::string>& env, int in,
                        int out, int err) const {
  std::vector<std::string> envs = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8"};
  // The microVM guest image CTest's vm_image fixture built (tests/CMakeLists.txt).
  if (const char* cache = std::getenv("AIRLOCK_CACHE_DIR")) envs.push_back(std::string("AIRLOCK_CACHE_DIR=") + cache);
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> av, ev;
  for (auto& a : argv) av.push_back(a.data());
  av.push_back(nullptr);
  for (auto& e : envs) ev.push_back(e.data());
  ev.push_back(nullptr);
  bool drop = id_ == Identity::Nobody;
  std::string cwd = workspace_;
  std::vector<std::string> join;
  for (const auto& d : delegated_) join.push_back(d + "/cgroup.procs");
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    if (::chdir(cwd.c_str()) < 0) ::_exit(121);
    for (const auto& procs : join) {
      int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0 || ::write(fd, "0", 1) != 1) ::_exit(124);
      ::close(fd);
    }
    if (drop && (::setgroups(0, nullptr) < 0 || ::setresgid(kNobody, kNobody, kNobody) < 0 ||
                 ::setresuid(kNobody, kNobody, kNobody) < 0))
      ::_exit(122);
    ::execve(av[0], av.data(), ev.data());
    ::_exit(123);
  }
  return pid;
}

std::unique_ptr<Spawned> CliFixture::spawn(std::vector<std::string> argv, const std::map<std::string, std::string>& env) {
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) < 0 || ::pipe2(out, O_CLOEXEC) < 0 || ::pipe2(err, O_CLOEXEC) < 0)
    throw std::runtime_error("pipe");
  pid_t pid = launch(std::move(argv), env, in[0], out[1], err[1]);
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  return std::make_unique<Spawned>(pid, in[1], out[0], err[0]);
}

Spawned::~Spawned() {
  if (!reaped_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  for (int fd : {in_, out_, err_})
    if (fd >= 0) ::close(fd);
}

bool Spawned::send(const std::string& text) {
  if (in_ < 0) return false;
  ::signal(SIGPIPE, SIG_IGN);
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(in_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

void Spawned::close_stdin() {
  if (in_ >= 0) ::close(in_);
  in_ = -1;
}

void Spawned::drain_err(int timeout_ms) {
  if (err_ < 0) return;
  pollfd p = {err_, POLLIN, 0};
  char buf[4096];
  while (::poll(&p, 1, timeout_ms) > 0) {
    ssize_t n = ::read(err_, buf, sizeof buf);
    if (n <= 0) {
      ::close(err_);
      err_ = -1;
      return;
    }
    err_buf_.append(buf, static_cast<size_t>(n));
    timeout_ms = 0;
  }
}

std::optional<std::string> Spawned::read_line(int timeout_seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  char buf[4096];
  for (;;) {
    if (auto nl = out_buf_.find('\n'); nl != std::string::npos) {
      std::string line = out_buf_.substr(0, nl);
      out_buf_.erase(0, nl + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || out_ < 0) return std::nullopt;
    drain_err(0);  // a child blocked on a full stderr pipe would never answer
    pollfd p = {out_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 100))) <= 0) continue;
    ssize_t n = ::read(out_, buf, sizeof buf);
    if (n <= 0) {
      ::close(out_);
      out_ = -1;
      continue;
    }
    out_buf_.append(buf, static_cast<size_t>(n));
  }
}

void Spawned::signal(int sig) { ::kill(pid_, sig); }

int Spawned::wait(int timeout_seconds) {
  if (reaped_) return status_;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  int st = 0;
  for (;;) {
    drain_err(10);
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &st, 0);
      break;
    }
  }
  reaped_ = true;
  drain_err(100);
  status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return status_;
}

const std::string& Spawned::err() {
  drain_err(0);
  return err_buf_;
}

CliResult CliFixture::run_program(std::vector<std::string> argv, const std::string& input,
                                  const std::map<std::string, std::string>& env, int timeout_seconds,
                                  void (*on_start)(pid_t)) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) < 0 || ::pipe2(err, O_CLOEXEC) < 0) throw std::runtime_error("pipe");
  // stdin: a memfd holding `input` (empty: end of file at once), so nothing here blocks on it.
  int in = ::memfd_create("cli-stdin", MFD_CLOEXEC);
  if (in < 0 || ::write(in, input.data(), input.size()) != static_cast<ssize_t>(input.size()) ||
      ::lseek(in, 0, SEEK_SET) < 0)
    throw std::runtime_error("memfd for stdin");
  int child_in = stdin_fd >= 0 ? stdin_fd : in;
  pid_t pid = launch(std::move(argv), env, child_in, out[1], err[1]);
  ::close(in);
  ::close(out[1]);
  ::close(err[1]);
  if (on_start) on_start(pid);
  CliResult r;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[4096];
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      break;
    }
    if (::poll(fds, 2, static_cast<int>(left.count())) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(n));
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  int st = 0;
  ::waitpid(pid, &st, 0);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

}  // namespace airlock::testing
