// container_engine: the OCI engine the container tier drives (Podman, one container per command),
// the images `airlock image build` makes for it, and the probe that checks an image here. The
// probe (probe_container) is the only writer of plan::ContainerFacts.
//
// airlock keeps its own image store, apart from the user's: the engine runs with its storage in
// STATE/containers/storage, its configuration (STATE/containers/containers.conf: no events log,
// cgroupfs) and HOME there too, and its run directory in a short directory of this user's
// (/run/airlock-containers-HASH for root, /tmp/airlock-containers-UID-HASH otherwise; the engine
// takes at most 50 characters). Nothing is ever pulled: every run says --pull never.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/child_process.h"
#include "base/error.h"
#include "base/json_util.h"
#include "plan/host_facts.h"
#include "plan/plan.h"

namespace airlock::exec {

// The program the probe runs inside a container, beside airlock (src/cli/container_check_main.c).
inline constexpr std::string_view kContainerCheckProgram = "airlock-container-check";
// Where the check is bound (read-only) inside the container: every run's first process is it, as
// `--init -- COMMAND` (its lifeline on descriptor 3, its exec report on 4).
inline constexpr std::string_view kContainerCheckInside = "/.airlock-check";
// The check program beside this executable, or AIRLOCK_EXECUTOR_UNAVAILABLE saying it is missing.
Result<std::string> container_check_program();
// A check older than this, or from another boot, engine version or runtime, is stale: measured again.
inline constexpr int64_t kContainerCheckMaxAgeSeconds = 24 * 3600;

// The engine as this user and this state directory run it.
struct Engine {
  std::string program;  // "/usr/bin/podman"
  std::string state_dir;
  std::string storage, run_root, home, conf;
  // A shared lock on STATE/containers/lock while any copy of this Engine lives. The last user of
  // a state directory's engine (an exclusive lock then granted) removes the run directory: it
  // lives outside the state directory, and nothing of the engine runs any more.
  std::shared_ptr<void> lease;
  // The engine's global options and environment: every engine command starts with these.
  std::vector<std::string> argv(std::vector<std::string> rest) const;
  std::vector<std::string> env() const;
};

// The engine for `state_dir`, its directories made (the run directory checked to be ours, not a
// link). AIRLOCK_EXECUTOR_UNAVAILABLE naming what is missing (Debian's podman).
Result<Engine> open_engine(const std::string& state_dir);

// An engine command run to its end: its exit, stdout (bounded) and stderr (bounded).
struct EngineOutput {
  ExitStatus status;
  std::string out, err;
  bool ok() const { return !status.signaled && status.code == 0; }
};
// `input_fd` is the command's stdin (-1: /dev/null). Killed past `limit`: AIRLOCK_EXECUTOR_UNAVAILABLE.
Result<EngineOutput> run_engine(const Engine& e, const std::vector<std::string>& args, std::chrono::milliseconds limit,
                                int input_fd = -1);

// Starts an engine command with the given descriptors (-1: this process's own), in a process group of its
// own, joined to a cgroup first when `cgroup_join_fds` are given (the child writes "0" to each),
// killed (SIGKILL) should this thread's process end first. `pass_fds` become its descriptors 3, 4, ...
Result<ChildProcess> spawn_engine(const Engine& e, const std::vector<std::string>& args, int in, int out, int err,
                                  const std::vector<int>& cgroup_join_fds = {}, const std::vector<int>& pass_fds = {});

// The two pipes between airlock and a run's init (airlock-container-check --init). The init holds
// the lifeline's read end: when every copy of its write end is closed, which the kernel does for
// an airlock killed outright, the init kills everything in the container. On the report the init
// says whether it started the command and how the command ended.
struct Lifeline {
  UniqueFd keep;         // the lifeline's write end, held here until the container is gone
  UniqueFd reports;      // the report's read end (non-blocking)
  UniqueFd pass[2];      // the init's ends: passed to the engine as descriptors 3 and 4, then closed here
  std::vector<int> pass_fds() const { return {pass[0].get(), pass[1].get()}; }
  // What the init reported so far (airlock-container-check.c's records): each call reads what
  // arrived since the last, and returns everything reported.
  struct Report {
    std::optional<int> exec_errno;    // the command could not be started
    std::optional<int> init_errno;    // the init itself failed
    std::optional<ExitStatus> ended;  // how the command ended
    bool malformed = false;           // a record the init never writes, or one kind twice
  };
  const Report& read_reports();

 private:
  Report said_;
};
Result<Lifeline> make_lifeline();

// An image airlock built, as STATE/containers/images.json records it.
struct ImageRecord {
  std::string reference;  // NAME@sha256:<manifest digest>: what a policy's `image` names
  std::string image_id;   // sha256:<config digest>
  std::string source;     // "dir:/abs/path"
  int64_t built_at = 0;
  Json to_json() const;
};
Result<std::vector<ImageRecord>> list_images(const std::string& state_dir);

// `airlock image build NAME --from-dir DIR`: DIR as the image's one layer (owned by root, times at
// zero, in name order), imported into airlock's store, recorded, then checked here. NAME is the
// image's name without a tag ("tools", "localhost/tools").
Result<ImageRecord> build_image_from_dir(const std::string& state_dir, const std::string& name,
                                         const std::string& dir);
// `airlock image build NAME --from-debian PKG...`: what apt would install on a machine with
// nothing installed (apt-get --simulate against an empty dpkg status, no Recommends: the packages,
// their Depends and Pre-Depends, one alternative each), downloaded at exactly those versions by
// apt-get from this machine's sources and unpacked in name order (dpkg-deb --extract: no
// maintainer script runs, so no alternatives links or caches they would make) as the image's one
// layer; the record's source names each package and version. The packages are trusted as apt
// trusts them (unpacked as this user). A name that is no Debian package name, or that apt cannot
// locate: AIRLOCK_OPTION_INVALID; apt failing otherwise (no network to the sources):
// AIRLOCK_EXECUTOR_UNAVAILABLE with apt's last words.
Result<ImageRecord> build_image_from_debian(const std::string& state_dir, const std::string& name,
                                            const std::vector<std::string>& packages);

// The engine arguments of one `run` under `plan` (no --rm: the executor reads the container's end
// before it removes it): no network, read-only root, the view at the workdir, a tmpfs /tmp, every
// capability dropped, no_new_privs, the seccomp profile at `seccomp_file`, the plan's rlimits. The
// sandbox's cgroup limits: as root the engine sets them on the container's own cgroup
// (`engine_limits`); rootless, the engine makes no cgroup and is started inside airlock's.
struct ContainerRun {
  std::string name;     // the container's name: "airlock-SESSION-N"
  std::string view;     // host path bound at the plan's workdir (/work); "" for none
  std::string scratch;  // host path bound at /tmp; "" for a tmpfs there
  std::string workdir;  // where the command starts, inside
  std::string env_file;  // the command's environment, NAME=value lines (never on the engine's argv)
  uint64_t engine_timeout_s = 0;  // the engine's own kill, should airlock be gone: 0 for none
  std::vector<std::string> read_only;  // host paths bound read-only at the same path
  std::vector<std::pair<std::string, std::string>> extra_ro_binds;  // host path, path inside
  std::string seccomp_file;
  bool engine_limits = false;
  bool interactive = false;  // stdin kept open
  // The check program's host path, bound at kContainerCheckInside; the command then runs under it as
  // init (--init, with a Lifeline's descriptors passed to the engine).
  std::string init_program;
  bool pass_fd = false;  // a third descriptor passed (after the Lifeline's) becomes the command's 3
  // How many cgroup join files follow (after the pass_fd's): the init joins them before it starts
  // the command, so the container alone, not the engine, is in that cgroup (rootless).
  int joins = 0;
  std::string monitor_pidfile;  // monitor_pidfile(): where the monitor writes its pid; "" for the engine's own
  std::vector<std::string> argv;  // the command
};
std::vector<std::string> container_run_args(const plan::ContainerTierPlan& tier, const plan::LimitsPlan& limits,
                                            const ContainerRun& run);

// Writes `env` (NAME=value) as the engine's environment file, 0600. A value the file cannot carry
// (a newline, a NUL) is AIRLOCK_POLICY_INVALID naming the variable.
Result<void> write_env_file(const std::string& path, const std::vector<std::string>& env);

// Whether the engine's store holds no container named `name`, read without starting the engine:
// containers.json and volatile-containers.json (where newer engines keep --rm containers), in the
// store and in the run directory. Its file system is what it checks: a row of the engine's own
// database whose removal failed is not (the engine logs that). nullopt when a file cannot be read.
std::optional<bool> container_gone_from_store(const Engine& e, const std::string& name);

// Every run's container is marked (STATE/containers/running/NAME) before the engine starts it and
// unmarked once it is checked gone and its monitor has ended, as the ledger records an intent
// before its effect.
Result<void> mark_running(const Engine& e, const std::string& name);
void unmark_running(const Engine& e, const std::string& name);
// Where the engine's monitor of the run `name` (conmon) writes its pid: STATE/containers/monitors/NAME
// (ContainerRun::monitor_pidfile). The monitor outlives the container: as it ends, it runs the
// engine's own cleanup (`container cleanup --rm`), which writes in the run directory; a session
// that removed that directory before then would find it made again.
std::string monitor_pidfile(const Engine& e, const std::string& name);
// Waits, up to `limit`, for the run's monitor to end (its cleanup with it), then removes its pid
// file and returns true. A pid file that names no monitor (never written, the process gone, or
// another program with the pid now) is nothing to wait for. False: the monitor still runs at the
// limit, and its pid file stays.
bool await_monitor(const Engine& e, const std::string& name, std::chrono::milliseconds limit);
// Removes what a killed airlock left: each marked container of a session with no live owner
// (named airlock-SESSION-N), `except` the live one, once its monitor has ended; and the pid files of
// monitors with no mark that have ended. No engine command runs when none is marked.
void remove_abandoned_containers(const Engine& e, const std::string& except_session);

// Where each of a prepared cgroup's directories is, as /proc/PID/cgroup shows it: controller
// ("" for cgroup2) -> path below that hierarchy's root.
std::vector<std::pair<std::string, std::string>> cgroup_paths(const std::vector<std::string>& dirs);

// The container tier's facts for `f`: the engine, the runtime that runs a container here (crun,
// else runc, each tried with a real one-shot container of airlock's check image), and each
// recorded image, checked by running the check inside it with the tier's confinement: it must
// see no capability, no_new_privs, a seccomp filter, a read-only root, no network device but
// loopback, and its memory and pids limits (as root, the limits the probe asked the engine for;
// rootless, airlock's own cgroup). A check
// kept from this boot, engine and runtime within kContainerCheckMaxAgeSeconds is reused unless
// `fresh`. Never fails: what cannot be measured is reasons["container"] or the image's reason.
void probe_container(plan::HostFacts& f, const std::string& state_dir, bool fresh);

}  // namespace airlock::exec
