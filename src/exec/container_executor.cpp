// The container executor. One run: the plan's cgroup limits (airlock's cgroup, rootless; the
// engine's, as root), then `podman run --rm` of the pinned image's content id under airlock's init
// (airlock-container-check --init), the view bound at /work, the command's descriptors handed to
// the engine; the wall clock kept here (SIGTERM to the engine, which passes it on, then `podman
// kill`) until the init reports the command's end; the container checked gone (removed by the
// engine, or here when the engine did not end as the container did) and airlock's cgroup released.
#include "exec/container_executor.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <chrono>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>

#include "base/beneath.h"
#include "base/fs.h"
#include "exec/container_engine.h"
#include "exec/enforced.h"
#include "linux/cgroup.h"
#include "linux/seccomp.h"

namespace airlock::exec {
namespace {

constexpr auto kEngineLimit = std::chrono::seconds(120);

class ContainerExecutor final : public Executor {
 public:
  ContainerExecutor(const plan::ExecutionPlan& plan, const SessionDirs& dirs, std::string session_id)
      : plan_(plan), tier_(std::get<plan::ContainerTierPlan>(plan_.confinement)), dirs_(dirs),
        session_id_(std::move(session_id)) {}

  Result<void> prepare() {
    // SessionDirs.root is STATE/sessions/ID.
    std::string state = dirs_.root.substr(0, dirs_.root.rfind("/sessions/"));
    engine_ = TRY(open_engine(state));
    init_program_ = TRY(container_check_program());
    // What an airlock killed outright left running (its engine's own --timeout bounds it too).
    remove_abandoned_containers(engine_, session_id_);
    auto seccomp = TRY(linux::oci_seccomp_profile(tier_.seccomp));
    seccomp_file_ = dirs_.root + "/seccomp.json";
    TRY(write_file_atomic(seccomp_file_, seccomp.profile.dump(), 0600));
    enforced_.executor = policy::ExecutorKind::Container;
    enforced_.tier = plan_.tier();
    enforced_.seccomp = std::move(seccomp.applied);
    enforced_.cgroup = tier_.cgroup;
    enforced_.no_new_privs = true;
    enforced_.capabilities_dropped = true;
    enforced_.process_limit = plan_.limits.process_mechanism;
    enforced_.wall_timeout_ms = plan_.limits.wall_timeout_ms;
    enforced_.network = NetworkEnforced::None;
    enforced_.container = ContainerEnforced{tier_.container.engine, tier_.container.runtime, tier_.container.rootless,
                                            tier_.container.image, tier_.container.image_id, tier_.container.workdir};
    return {};
  }

  const Enforced& enforced() const override { return enforced_; }

  Result<RunOutcome> run(const Command& cmd) override {
    if (cmd.argv.empty()) return fail(Code::PolicyInvalid, "no command to run");
    {
      std::lock_guard lock(mu_);
      if (stop_requested_) return fail(Code::SessionKilled, "the session was stopped");
      run_stop_requested_ = false;
    }
    const std::string& workdir = tier_.container.workdir;
    // The view is at /work and the scratch directory at /tmp, wherever the command starts.
    std::string pwd = TRY(sandbox_path(cmd.cwd, dirs_, workdir));
    ContainerRun r;
    r.name = fmt::format("airlock-{}-{}", session_id_, ++runs_);
    r.monitor_pidfile = monitor_pidfile(engine_, r.name);
    r.view = dirs_.view;
    r.scratch = dirs_.scratch;
    r.workdir = pwd;
    r.read_only = plan_read_only_paths();
    r.seccomp_file = seccomp_file_;
    r.interactive = cmd.stdin_fd >= 0;
    r.argv = cmd.argv;
    r.init_program = init_program_;
    r.pass_fd = cmd.pass_fd >= 0;
    // The view's protected paths, read-only inside (the first wall; write-back is the second).
    // The engine's bind follows links, so each is first resolved beneath the view without any: one
    // a command turned into a link (or put under one) is not bound, as the namespaces tier skips
    // it, and write-back still refuses any change there. Runs are sequential, and nothing of the
    // last one runs now, so nothing changes it between this check and the bind.
    UniqueFd view_fd(::open(dirs_.view.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!view_fd) return fail_errno(Code::ExecutorUnavailable, "open the view " + dirs_.view, errno);
    for (const auto& p : dirs_.view_read_only) {
      if (p.find(':') != std::string::npos || p.find(',') != std::string::npos) continue;
      auto opened = open_beneath(view_fd.get(), p, O_PATH | O_NOFOLLOW | O_CLOEXEC);
      if (!opened) continue;
      struct stat st {};
      if (::fstat(opened->get(), &st) < 0 || S_ISLNK(st.st_mode)) continue;
      r.extra_ro_binds.push_back({dirs_.view + "/" + p, workdir + "/" + p});
    }
    std::vector<std::string> env = sandbox_environment(plan_, workdir, "/tmp", pwd, session_id_);
    env.insert(env.end(), cmd.env.begin(), cmd.env.end());
    std::erase_if(env, [&](const std::string& kv) {
      std::string_view name = std::string_view(kv).substr(0, kv.find('='));
      return std::find(cmd.scrub_env.begin(), cmd.scrub_env.end(), name) != cmd.scrub_env.end();
    });
    if (cmd.private_dirs)
      for (const char* var : {"TMPDIR", "HOME"}) {
        std::string prefix = std::string(var) + "=";
        std::erase_if(env, [&](const std::string& kv) { return kv.starts_with(prefix); });
        env.push_back(prefix + "/tmp");
      }
    // The environment goes in a file of the session's own (0700) directory, never on the engine's
    // command line, which every user may read; it is gone when the run is.
    r.env_file = fmt::format("{}/env-{}", dirs_.root, runs_);
    TRY(write_env_file(r.env_file, env));
    struct RemoveFile {
      std::string path;
      ~RemoveFile() { ::unlink(path.c_str()); }
    } env_file_gone{r.env_file};

    uint64_t timeout_ms = plan_.limits.wall_timeout_ms;
    if (cmd.timeout_ms && (*cmd.timeout_ms < timeout_ms || timeout_ms == 0)) timeout_ms = *cmd.timeout_ms;
    // Should airlock be killed, the engine ends the container itself a little after airlock would.
    if (timeout_ms) r.engine_timeout_s = (timeout_ms + plan_.limits.kill_grace_ms) / 1000 + 5;

    // Rootless, the engine makes no cgroup here: the container runs in airlock's, joined by its
    // init before the command starts. As root the engine sets the same limits on the
    // container's own cgroup (the probe's check measured that it does).
    std::optional<linux::PreparedCgroup> cg;
    std::vector<int> join;
    if (tier_.container.rootless) {
      cg = TRY(linux::prepare_sandbox_cgroup(tier_.cgroup, r.name));
      for (const auto& fd : cg->procs) join.push_back(fd.get());
    } else {
      r.engine_limits = true;
    }

    // The container's init holds the lifeline's read end; its write end stays in this process
    // until the container is gone, so an airlock killed outright takes the container with it.
    auto lifeline = make_lifeline();
    if (!lifeline) {
      if (cg) (void)cg->release();
      return std::unexpected(lifeline.error());
    }
    if (auto marked = mark_running(engine_, r.name); !marked) {
      if (cg) (void)cg->release();
      return std::unexpected(marked.error());
    }
    auto t0 = std::chrono::steady_clock::now();
    std::vector<int> pass = lifeline->pass_fds();
    if (r.pass_fd) pass.push_back(cmd.pass_fd);
    // Rootless, the container's init joins airlock's cgroup before it starts the command: the
    // engine's own processes (its threads, conmon, the runtime) are never counted against the
    // command's limits.
    pass.insert(pass.end(), join.begin(), join.end());
    r.joins = static_cast<int>(join.size());
    auto started = spawn_engine(engine_, container_run_args(tier_, plan_.limits, r), cmd.stdin_fd, cmd.stdout_fd,
                                cmd.stderr_fd, {}, pass);
    lifeline->pass[0].reset();
    lifeline->pass[1].reset();
    if (!started) {
      unmark_running(engine_, r.name);
      if (cg) (void)cg->release();
      return std::unexpected(started.error());
    }
    ChildProcess child = std::move(*started);
    {
      std::lock_guard lock(mu_);
      running_ = child.pid();
      running_name_ = r.name;
      running_cg_ = cg ? &*cg : nullptr;
    }
    bool timed_out = false, stopped = false;
    std::optional<ExitStatus> engine_end;
    // No wall limit: a deadline that never comes.
    const auto deadline = timeout_ms ? t0 + std::chrono::milliseconds(timeout_ms) : std::chrono::steady_clock::time_point::max();
    bool term_sent = false;
    std::chrono::steady_clock::time_point term_at;
    std::optional<std::chrono::steady_clock::time_point> command_ended;
    for (;;) {
      auto waited = child.wait_for(std::chrono::milliseconds(50));
      if (!waited) break;
      if (*waited) {
        engine_end = **waited;
        break;
      }
      // Once the init has said the command ended, the clock stops: the engine's removal of the
      // container (--rm) is neither timed nor interrupted.
      if (!command_ended && lifeline->read_reports().ended) command_ended = std::chrono::steady_clock::now();
      if (command_ended) {
        if (std::chrono::steady_clock::now() - *command_ended > kEngineLimit) {
          (void)child.signal(SIGKILL);
          command_ended = std::chrono::steady_clock::now() + std::chrono::hours(1);
        }
        continue;
      }
      bool stop_now;
      {
        std::lock_guard lock(mu_);
        stop_now = stop_requested_ || run_stop_requested_;
      }
      auto now = std::chrono::steady_clock::now();
      if (!term_sent && (stop_now || now >= deadline)) {
        timed_out = !stop_now;
        stopped = stop_now;
        // The engine passes SIGTERM to the container; after the grace, the container is killed.
        (void)child.signal(SIGTERM);
        term_sent = true;
        term_at = now;
      } else if (term_sent && now - term_at >= std::chrono::milliseconds(plan_.limits.kill_grace_ms)) {
        (void)run_engine(engine_, {"kill", "--signal", "KILL", r.name}, kEngineLimit);
        (void)child.signal(SIGKILL);
        term_at = now + std::chrono::hours(1);
      }
    }
    {
      std::lock_guard lock(mu_);
      running_ = -1;
      running_cg_ = nullptr;
    }
    if (!engine_end) engine_end = child.wait().value_or(ExitStatus{true, 0, SIGKILL});
    const Lifeline::Report said = lifeline->read_reports();
    if (said.ended && !command_ended) command_ended = std::chrono::steady_clock::now();
    auto wall = (command_ended ? std::min(*command_ended, std::chrono::steady_clock::now()) : std::chrono::steady_clock::now()) - t0;

    // How the command ended, from the container's init: the engine is asked nothing more when
    // the init saw the command end and the engine ended with that status (its --rm removed it).
    const bool engine_normal = !engine_end->signaled && said.ended && engine_end->code == said.ended->shell_status();
    auto t_end = std::chrono::steady_clock::now();
    std::optional<bool> gone = engine_normal ? container_gone_from_store(engine_, r.name) : std::nullopt;
    std::string removal_said;
    if (gone != std::optional<bool>(true)) {
      // The engine did not end as the container did (killed, failed, or its removal failed):
      // removed here, and checked gone through the engine.
      auto removed = run_engine(engine_, {"rm", "--force", "--time", "0", "--ignore", r.name}, kEngineLimit);
      removal_said = removed ? removed->err : removed.error().message;
      auto exists = run_engine(engine_, {"container", "exists", r.name}, kEngineLimit);
      gone = exists && !exists->status.signaled && exists->status.code == 1;
    }
    auto released = cg ? cg->release() : Result<void>{};
    // Unmarked once the engine's monitor has ended too (its cleanup writes in the run directory);
    // a container still there stays marked for the sweep, and its monitor is awaited all the same.
    if (*gone) unmark_running(engine_, r.name);
    else (void)await_monitor(engine_, r.name, std::chrono::seconds(60));
    double teardown_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_end).count();
    if (!released) return std::unexpected(released.error());
    if (!*gone)
      return fail(Code::ExecutorUnavailable,
                  fmt::format("the container {} is still there after `{} rm`: {}", r.name, engine_.program, removal_said),
                  {{"container", r.name}});

    RunOutcome out;
    out.program = cmd.argv[0];
    if (said.init_errno || said.malformed)
      return fail(Code::ExecutorUnavailable,
                  fmt::format("the container's init ({}) failed: {}", kContainerCheckProgram,
                              said.malformed ? "its report is not what it writes" : std::strerror(*said.init_errno)),
                  {{"image", tier_.container.image}});
    // The init could not start the command: never taken for the command's exit.
    if (said.exec_errno && !timed_out && !stopped)
      return std::unexpected(command_not_started(
          cmd.argv[0],
          fmt::format("cannot execute {} in {}: {}", cmd.argv[0], tier_.container.image, std::strerror(*said.exec_errno)),
          *said.exec_errno));
    if (said.ended) {
      out.status = *said.ended;
    } else if (timed_out || stopped) {
      // Killed with its init (the engine's kill after the grace): the command's end is that kill.
      out.status = ExitStatus{true, 0, SIGKILL};
    } else {
      // No word from the init: the engine failed before the command started (its 125, its message on
      // the command's stderr), or ended while the container ran. Never taken for the command's end.
      return fail(Code::ExecutorUnavailable,
                  fmt::format("{} ended ({}) without the container's init saying how the command ended (its "
                              "message went to the command's stderr)",
                              engine_.program,
                              engine_end->signaled ? fmt::format("signal {}", engine_end->signal)
                                                   : fmt::format("exit {}", engine_end->code)),
                  {{"engine", engine_.program}, {"image", tier_.container.image}});
    }
    out.timed_out = timed_out;
    out.stopped = stopped;
    out.wall_ms = std::chrono::duration<double, std::milli>(wall).count();
    out.teardown_ms = teardown_ms;
    out.teardown_verified = true;
    return out;
  }

  void stop() override {
    std::lock_guard lock(mu_);
    stop_requested_ = true;
  }

  void stop_run() override {
    std::lock_guard lock(mu_);
    run_stop_requested_ = true;
  }

  // The policy's read_only_paths, bound read-only at the same path (the planner refused any beneath
  // what the container makes its own, and any a bind option cannot carry).
  std::vector<std::string> plan_read_only_paths() const { return tier_.read_only_paths; }

  Json usage_now() override {
    std::lock_guard lock(mu_);
    if (running_ < 0) return nullptr;
    // As root the container's cgroup is the engine's: not counted here.
    if (!running_cg_) return {{"memory_bytes", nullptr}, {"processes", nullptr}, {"cpu_us", nullptr}};
    auto u = linux::cgroup_usage(*running_cg_);
    auto j = [](const std::optional<uint64_t>& v) { return v ? Json(*v) : Json(nullptr); };
    return {{"memory_bytes", j(u.memory_bytes)}, {"processes", j(u.processes)}, {"cpu_us", j(u.cpu_us)}};
  }

 private:
  plan::ExecutionPlan plan_;
  const plan::ContainerTierPlan& tier_;  // in plan_
  SessionDirs dirs_;
  std::string session_id_;
  Engine engine_;
  std::string init_program_;  // airlock-container-check, every run's init
  std::string seccomp_file_;
  Enforced enforced_;
  int runs_ = 0;
  std::mutex mu_;
  pid_t running_ = -1;
  std::string running_name_;
  const linux::PreparedCgroup* running_cg_ = nullptr;
  bool stop_requested_ = false, run_stop_requested_ = false;
};

}  // namespace

Result<std::unique_ptr<Executor>> make_container_executor(const plan::ExecutionPlan& plan, const SessionDirs& dirs,
                                                          const std::string& session_id, const std::string&,
                                                          DoorStarter) {
  if (!std::holds_alternative<plan::ContainerTierPlan>(plan.confinement))
    return fail(Code::InternalError, "the container executor was given another tier's plan");
  auto ex = std::make_unique<ContainerExecutor>(plan, dirs, session_id);
  TRY(ex->prepare());
  return std::unique_ptr<Executor>(std::move(ex));
}

}  // namespace airlock::exec
