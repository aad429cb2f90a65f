// Canaries: the bait the escape suite plants on the host for one executor's run, and removes.
#pragma once

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/child_process.h"
#include "base/error.h"
#include "base/unique_fd.h"
#include "broker/loopback_http.h"
#include "egress/egress.h"

namespace airlock::escape {

// mkdtemp template of a run's canary directory.
inline constexpr std::string_view kCanaryDirTemplate = "/tmp/airlock-escape-XXXXXX";
// The secret the suite puts in its own environment while a tier runs.
inline constexpr std::string_view kCanaryEnvName = "AIRLOCK_ESCAPE_CANARY_SECRET";

// The door probes' bait: servers and listeners on loopback in the host's network namespace.
struct DoorBait {
  int http_port = 0;         // the allowed server on 127.0.0.1 and the forbidden one on 127.0.0.2, same port
  int dns_port = 0;          // UDP on 127.0.0.1: the suite's DNS responder (kDoorAllowedHost and the others)
  int udp_port = 0;          // UDP on 127.0.0.1: a sink for datagrams
  int ipv6_port = 0;         // TCP on ::1; 0 when the host has no IPv6 loopback
  std::string ipv6_missing;  // why there is no ::1 listener
};

// What was planted, as plain values the scenarios pass to probes and check afterwards. Every
// token is random per run, so a token seen later can only have come from its canary.
struct Bait {
  std::string root;          // the canary directory, mode 0700; also the run marker
  std::string probe_binary;  // root/airlock-probe: the copy every workspace's copy is made from
  std::string secret_file;   // root/secret/host-secret.txt: outside every workspace
  std::string secret_token;
  std::string key_file;  // root/home/.ssh/id_canary, mode 0600: a "credential"
  std::string key_token;
  std::string env_token;        // the value of kCanaryEnvName
  std::string outside_dir;      // root/outside: where a write outside the declared paths would land
  int tcp_port = 0;             // a listener on 127.0.0.1 in the host's network namespace
  std::string unix_socket;      // root/sock/agent.sock: a listener as an ssh-agent or a daemon has
  std::string abstract_socket;  // a listener in the abstract unix namespace (name without the NUL)
  pid_t sleeper_pid = 0;        // a host process: `airlock-probe host_sleeper --run ROOT TOKEN`
  std::string sleeper_token;
  std::string sleeper_planted;  // its nice, limits, I/O priority and CPUs as planted (sleeper_state())
  int shm_id = -1;              // a SysV shared memory segment (0600) holding ipc_token
  int msg_id = -1;              // a SysV message queue (0600) holding one message: ipc_token
  std::string ipc_token;
  std::string watched_dir;      // root/watched: files named after watched_token appear there during a run
  std::string watched_token;
  DoorBait door;
};

// One connection a listener accepted, and the first line the peer sent.
struct Connection {
  std::string listener;  // "tcp", "unix", "abstract", "ipv6"
  std::string first_line;
};

// Owns the canary directory (removed on destruction), the environment variable (restored), three
// listeners (closed), the sleeper (killed and reaped) and the door's bait: two HTTP servers, a DNS
// responder, a UDP sink and a ::1 listener (stopped and closed). Planted as the calling user, readable by
// it alone, so on the host tier a breach really happens and nothing is exposed to other users.
// Nothing of the host's own is touched.
class Canaries {
 public:
  // `probe_binary`: the probe program (kProbeProgram), copied in and run as the host sleeper.
  static Result<std::unique_ptr<Canaries>> plant(const std::string& probe_binary);
  ~Canaries();
  Canaries(const Canaries&) = delete;
  Canaries& operator=(const Canaries&) = delete;

  const Bait& bait() const { return bait_; }

  // A fresh workspace for one scenario: root/ws-<name>, holding .probe/airlock-probe (mode 0755) and
  // an empty out/ (the write-back path).
  Result<std::string> make_workspace(std::string_view name);
  // Connections the listeners accepted since the last call.
  std::vector<Connection> take_connections();
  // Whether `sig` is pending at the sleeper. It blocks SIGUSR1, so one sent to it stays pending
  // and shows in /proc/<pid>/status: a signal from a probe is visible from the host.
  bool sleeper_has_pending(int sig) const;
  bool sleeper_alive() const;
  // What a call by pid (not a signal) could change of the sleeper, as one line: its nice value,
  // its descriptor limit, its I/O priority and its CPUs. Compared with Bait::sleeper_planted.
  std::string sleeper_state() const;
  // Messages left in the SysV message queue (-1: cannot tell).
  long ipc_messages_left() const;
  // While the returned guard lives, a thread creates (and removes) files named after
  // Bait::watched_token in Bait::watched_dir, every 20 ms.
  std::shared_ptr<void> churn_watched_dir();
  // The capability lines (CapEff, CapPrm, CapAmb, CapBnd, NoNewPrivs) of the first process seen,
  // while the returned guard lives, whose argv holds `needle`: polled every 10 ms from the host.
  struct SeenStatus {
    std::mutex mu;
    pid_t pid = 0;
    std::string status;  // the lines, joined with "; "
    uint64_t eff = 0, prm = 0, amb = 0, bnd = 0;
    int no_new_privs = -1;
  };
  std::shared_ptr<SeenStatus> watch_status_of(std::string needle, std::shared_ptr<void>* guard);
  // Kills what a probe left behind: every child of this process that is not the suite's own
  // (this process is a child subreaper during the run) and every process whose argv carries the
  // run marker. Reaps its children. Returns the pids that were still running (zombies aside).
  std::vector<pid_t> kill_leftovers();
  // The door's bait, as the host sees it. Each take_ call returns what arrived since the last one.
  // Requests the allowed server (127.0.0.1) or the forbidden one (127.0.0.2) answered.
  std::vector<broker::HttpRequest> take_requests(bool forbidden);
  std::vector<std::string> take_dns_queries();  // the names the DNS responder was asked
  std::vector<std::string> take_datagrams();    // what the UDP sink received
  // The names of the door probes, for the door a session serves: the same table (and the same
  // count of lookups of kDoorRebindHost) the DNS responder answers from. Valid while this lives.
  egress::Resolver resolver();
  // Forgets every lookup, so kDoorRebindHost's first answer is the allowed address again.
  void reset_names();

  // Children this process already had before the suite started: never touched.
  void set_foreign_children(std::vector<pid_t> pids) { foreign_children_ = std::move(pids); }

 private:
  Canaries() = default;
  Bait bait_;
  std::optional<std::string> saved_env_;
  bool env_set_ = false;
  UniqueFd tcp_, unix_, abstract_;
  ChildProcess sleeper_;
  std::vector<pid_t> foreign_children_;
  struct Door;
  std::unique_ptr<Door> door_;
  Result<void> plant_door();
};

// The pids of this process's children (all threads), from /proc/self/task/*/children.
std::vector<pid_t> children_of_self();
// The argv of a process joined with spaces, or empty (gone, a zombie, or unreadable).
std::string process_cmdline(pid_t pid);
// True when the process exists and is not a zombie.
bool process_running(pid_t pid);

}  // namespace airlock::escape
