// Test support for running the real `airlock` binary as root or as an unprivileged user.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace airlock::testing {

// Who runs airlock: the test's own identity, or (when the test is root) uid/gid 65534.
enum class Identity { Self, Nobody };
std::string to_string(Identity id);

// A directory under `base` (/tmp unless given) removed (recursively) on destruction; owned by
// `owner` if given.
class TempDir {
 public:
  explicit TempDir(std::optional<uid_t> owner = std::nullopt, const std::string& base = "/tmp");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

struct CliResult {
  int status = -1;  // exit code, or 128 + signal
  std::string out, err;
};

// A program started by CliFixture::spawn, talked to over pipes while it runs. Killed (SIGKILL)
// and reaped on destruction if still running.
class Spawned {
 public:
  Spawned(pid_t pid, int in, int out, int err) : pid_(pid), in_(in), out_(out), err_(err) {}
  Spawned(const Spawned&) = delete;
  ~Spawned();
  pid_t pid() const { return pid_; }
  // Writes `text` to its stdin; false when it is closed.
  bool send(const std::string& text);
  void close_stdin();
  // The next line of its stdout (without the newline), or nullopt at end or after `timeout_seconds`.
  std::optional<std::string> read_line(int timeout_seconds = 60);
  void signal(int sig);
  // Waits for it to end (SIGKILL after `timeout_seconds`): exit code, or 128 + signal.
  int wait(int timeout_seconds = 60);
  // Its stderr so far (all of it once wait returned).
  const std::string& err();

 private:
  void drain_err(int timeout_ms);
  pid_t pid_;
  int in_, out_, err_;
  std::string out_buf_, err_buf_;
  bool reaped_ = false;
  int status_ = -1;
};

// One place a test runs airlock from: a copy of the binary and a state directory that
// the identity can use, and a workspace owned by it.
class CliFixture {
 public:
  explicit CliFixture(Identity id);
  Identity identity() const { return id_; }
  uid_t uid() const;
  const std::string& workspace() const { return workspace_; }
  const std::string& state_dir() const { return state_; }
  std::string binary() const { return binary_; }
  // Writes a policy file (JSON text) readable by the identity; returns its path.
  std::string write_policy(const std::string& json, const std::string& name = "policy.json");
  // Creates a file in the workspace, owned by the identity.
  void put(const std::string& rel, const std::string& content);
  // Runs `airlock ARGS...` as the identity, with `env` added to a minimal environment.
  // `on_start` (if set) is called with the child pid once started.
  CliResult run(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {},
                int timeout_seconds = 60, void (*on_start)(pid_t) = nullptr);
  // Runs any program (argv[0] absolute) the same way, with `input` as its stdin.
  CliResult run_program(std::vector<std::string> argv, const std::string& input = "",
                        const std::map<std::string, std::string>& env = {}, int timeout_seconds = 60,
                        void (*on_start)(pid_t) = nullptr);
  // Starts `argv` (argv[0] absolute) as the identity with pipes on stdin, stdout and stderr.
  std::unique_ptr<Spawned> spawn(std::vector<std::string> argv, const std::map<std::string, std::string>& env = {});
  // Makes the microvm tier available to this fixture's state directory: copies the record of the
  // `airlock vm verify` that CTest's vm_verified fixture ran on this host with this image
  // ($AIRLOCK_CACHE_DIR/verify/vm-verified.json). False, with why, when there is none.
  bool adopt_vm_verification(std::string* why);
  // The container tier's image for tests: directories and links to /usr (bin, sbin, lib, lib64),
  // built by `airlock image build` as the identity in this fixture's state directory, named in
  // `policy` with /usr among its read_only_paths, so the host's programs run inside. "" when done,
  // else why it could not be built (no engine here, say).
  std::string use_usr_image(nlohmann::json& policy);
  // How many session directories the state directory holds (a view left behind is one).
  size_t session_dirs() const;
  // The receipts files in the state directory.
  std::vector<std::string> receipts() const;
  // When >= 0 (and still open), what run() and run_program() give as stdin instead of `input`
  // (a terminal, say). The caller owns it.
  int stdin_fd = -1;
  ~CliFixture();

 private:
  // Forks and execs argv[0] as the identity, in the workspace, with `env` added to a minimal
  // environment and the given descriptors as its stdio; returns the child's pid.
  pid_t launch(std::vector<std::string> argv, const std::map<std::string, std::string>& env, int in, int out,
               int err) const;
  Identity id_;
  TempDir root_;
  std::string binary_, workspace_, state_;
  // For Nobody when the test is root: cgroups delegated to that user (as systemd's Delegate=
  // does: a directory it owns in each v1 hierarchy), which airlock runs in. Empty otherwise.
  std::vector<std::string> delegated_;
};

// True when the test may run as `id` here; otherwise sets `why`.
bool identity_available(Identity id, std::string* why);

// GTEST_SKIP unless AIRLOCK_REQUIRE_ALL_TIERS=1, then a failure: a missing feature by name.
bool require_all_tiers();

std::string read_text(const std::string& path);
// Every live (not zombie) process: its pid and its command line with NULs as spaces.
struct ProcessInfo {
  int pid;
  std::string cmdline;
};
std::vector<ProcessInfo> live_processes();
// The receipts of one file, oldest first.
std::vector<nlohmann::json> read_receipts(const std::string& path);
bool exists(const std::string& path);

}  // namespace airlock::testing
