// Test support for `airlock serve`: the real binary started in the background, stopped by a signal.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "server/client.h"

namespace airlock::testing {

// Starts `airlock --state-dir STATE serve ARGS...` as the test's own identity and waits for
// its "listening" line. The destructor stops it (SIGTERM, then SIGKILL) and reaps it.
class ServeProcess {
 public:
  // `env`: NAME=value entries added to the server's environment (a tool's `env` reads them).
  ServeProcess(const CliFixture& f, const std::vector<std::string>& args = {},
               const std::vector<std::string>& env = {});
  ~ServeProcess();
  ServeProcess(const ServeProcess&) = delete;

  bool ready() const { return !listening_.is_null(); }
  // Why it is not ready: its stderr and exit status.
  const std::string& failure() const { return failure_; }
  std::string socket() const { return listening_.value("unix", ""); }
  int tcp_port() const;
  server::Endpoint unix_endpoint() const {
    server::Endpoint e;
    e.unix_path = socket();
    return e;
  }
  server::Endpoint tcp_endpoint(const std::string& token) const {
    return {.unix_path = "", .host = "127.0.0.1", .port = tcp_port(), .token = token};
  }
  pid_t pid() const { return pid_; }
  // Sends `sig` and waits; returns the exit status (128 + signal if it died of one).
  int stop(int sig);
  std::string stderr_text() const;

 private:
  pid_t pid_ = -1;
  std::string err_path_;
  nlohmann::json listening_;
  std::string failure_;
};

// A reply that must have come (a transport failure fails the test).
server::HttpReply must(Result<server::HttpReply> r);

// What serve tests share: a workspace, the server, and opening a session on it.
struct ServeFixtureBase {
  // Starts the server with `args`; the test fails if it does not come up.
  void start(const std::vector<std::string>& args = {}, const std::vector<std::string>& env = {});
  // Opens a session; "" and `skipped` when no executor can run here (a failure when every tier
  // is required).
  std::string open(server::HttpClient& c, const std::string& policy);
  std::unique_ptr<CliFixture> f;
  std::unique_ptr<ServeProcess> srv;
  bool skipped = false;
};

// Pids of processes whose command line is exactly `argv` (a tool the test started).
std::vector<pid_t> processes_running(const std::vector<std::string>& argv);
// Waits (bounded) until no such process is left; true when none is.
bool wait_until_gone(const std::vector<std::string>& argv);

}  // namespace airlock::testing
