// ServeProcess: fork/exec of the real `airlock serve`, its ready line read from a pipe.
#include "serve_support.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

namespace airlock::testing {

namespace fs = std::filesystem;

ServeProcess::ServeProcess(const CliFixture& f, const std::vector<std::string>& args,
                           const std::vector<std::string>& env) {
  char tmpl[] = "/tmp/airlock-serve-err-XXXXXX";
  int err = ::mkstemp(tmpl);
  err_path_ = tmpl;
  int out[2];
  if (err < 0 || ::pipe2(out, O_CLOEXEC) < 0) {
    failure_ = "mkstemp or pipe failed";
    return;
  }
  std::vector<std::string> argv = {f.binary(), "--state-dir", f.state_dir(), "serve"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> av;
  for (auto& a : argv) av.push_back(a.data());
  av.push_back(nullptr);
  std::vector<std::string> envs = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8"};
  envs.insert(envs.end(), env.begin(), env.end());
  // The microVM guest image CTest's vm_image fixture built (tests/CMakeLists.txt).
  if (const char* cache = std::getenv("AIRLOCK_CACHE_DIR")) envs.push_back(std::string("AIRLOCK_CACHE_DIR=") + cache);
  std::vector<char*> ev;
  for (auto& e : envs) ev.push_back(e.data());
  ev.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // a test that dies takes its server with it
    int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    ::dup2(out[1], 1);
    ::dup2(err, 2);
    ::execve(av[0], av.data(), ev.data());
    ::_exit(123);
  }
  ::close(out[1]);
  ::close(err);
  // The first stdout line, bounded: a server that never says it listens is a failure.
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  pollfd p{out[0], POLLIN, 0};
  while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    if (::poll(&p, 1, 200) <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    line.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);  // later output (none is written) would get EPIPE, which serve ignores
  auto j = nlohmann::json::parse(line.substr(0, line.find('\n')), nullptr, false);
  if (!j.is_discarded() && j.contains("listening")) {
    listening_ = j["listening"];
  } else {
    int st = stop(SIGTERM);
    failure_ = "airlock serve did not start (status " + std::to_string(st) + "): " + stderr_text();
  }
}

ServeProcess::~ServeProcess() {
  if (pid_ > 0) stop(SIGTERM);
  if (!err_path_.empty()) ::unlink(err_path_.c_str());
}

int ServeProcess::tcp_port() const {
  std::string tcp = listening_.value("tcp", "");
  return tcp.empty() ? 0 : std::atoi(tcp.substr(tcp.rfind(':') + 1).c_str());
}

int ServeProcess::stop(int sig) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, sig);
  int st = 0;
  for (int i = 0; i < 600; ++i) {  // up to a minute, then it is killed
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &st, 0);
  pid_ = -1;
  return 128 + SIGKILL;
}

std::string ServeProcess::stderr_text() const { return read_text(err_path_); }

std::vector<pid_t> processes_running(const std::vector<std::string>& argv) {
  std::string want;
  for (const auto& a : argv) want += a + '\0';
  std::vector<pid_t> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmd == want) found.push_back(std::atoi(name.c_str()));
  }
  return found;
}

bool wait_until_gone(const std::vector<std::string>& argv) {
  for (int i = 0; i < 100; ++i) {
    if (processes_running(argv).empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

server::HttpReply must(Result<server::HttpReply> r) {
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().message);
  return r ? *r : server::HttpReply{};
}

void ServeFixtureBase::start(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  srv = std::make_unique<ServeProcess>(*f, args, env);
  ASSERT_TRUE(srv->ready()) << srv->failure();
}

std::string ServeFixtureBase::open(server::HttpClient& c, const std::string& policy) {
  auto r = must(c.request("POST", "/v1/sessions", policy));
  if (r.status == 503 && r.json()["error"]["code"] == "AIRLOCK_EXECUTOR_UNAVAILABLE") {
    if (!require_all_tiers()) skipped = true;
    return "";
  }
  EXPECT_EQ(r.status, 201) << r.body;
  return r.json().value("session", "");
}

}  // namespace airlock::testing
