// The process executors: landlock (Landlock + seccomp + rlimits, supervised), namespaces (the
// same inside new namespaces with cgroup limits and a root of its own) and host (the same
// supervision with no confinement; development profile only). One mechanism; the tier plan says
// which steps apply.
#include "exec/process_executor.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>
#include <thread>
#include <variant>

#include "base/fs.h"
#include "linux/apply.h"
#include "linux/cgroup.h"
#include "linux/landlock.h"
#include "linux/netns.h"
#include "linux/rlimits.h"
#include "linux/seccomp.h"
#include "linux/tty.h"
#include "policy/task_policy.h"

namespace airlock::exec {
namespace {

// What a tier plan asks the process executor to apply: pointers into its own copy of the plan,
// taken once from the tier's alternative. The host tier applies none of them.
struct Steps {
  const plan::LandlockPlan* landlock = nullptr;
  const plan::SeccompPlan* seccomp = nullptr;
  const plan::NamespacesSandbox* sandbox = nullptr;  // the namespaces tier: namespaces, root, cgroup
  const plan::DoorPlan* door = nullptr;
};

Result<Steps> steps_of(const plan::TierPlan& tier) {
  Steps s;
  if (const auto* t = std::get_if<plan::LandlockTierPlan>(&tier)) {
    s.landlock = &t->landlock;
    s.seccomp = &t->seccomp;
  } else if (const auto* t = std::get_if<plan::NamespacesTierPlan>(&tier)) {
    s.sandbox = &t->sandbox;
    s.seccomp = &t->sandbox.seccomp;
    if (t->sandbox.landlock) s.landlock = &*t->sandbox.landlock;
    if (t->door) s.door = &*t->door;
  } else if (!std::holds_alternative<plan::HostTierPlan>(tier)) {
    return fail(Code::InternalError,
                fmt::format("the process executor was given a plan of the {} tier",
                            policy::to_string(plan::executor_of(tier))));
  }
  return s;
}

// The one thread that builds sandboxes ahead for every executor of this process. It never ends:
// a supervisor's parent-death signal follows the thread that cloned it, so a sandbox built by a
// thread that ended would die with it.
class Warmer {
 public:
  static Warmer& get() {
    static Warmer* w = new Warmer;  // never destroyed: its thread outlives static destruction
    return *w;
  }
  void post(std::function<void()> job) {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(job));
    cv_.notify_one();
  }

 private:
  Warmer() {
    std::thread([this] {
      for (;;) {
        std::function<void()> job;
        {
          std::unique_lock lock(mu_);
          cv_.wait(lock, [&] { return !jobs_.empty(); });
          job = std::move(jobs_.front());
          jobs_.pop_front();
        }
        try {
          job();
        } catch (...) {  // a job reports its own failures; none may end the process
        }
      }
    }).detach();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
};

// One sandbox: its cgroup, the door's channel and the launched supervisor, torn down together.
struct Sandbox {
  linux::PreparedCgroup cg;
  linux::DoorChannel door;
  linux::Launched launched;
};

// Ends a sandbox that will not run its command and removes its cgroup. Its channels are closed
// first: a waiting supervisor then kills and reaps its own init and exits, so no init is left
// to whoever reaps orphans (airlock itself, when it is a container's pid 1 or a subreaper).
// Only one that does not end soon is killed outright.
Result<void> discard(std::optional<Sandbox> sb) {
  if (!sb) return {};
  sb->launched.go.reset();
  sb->launched.command.reset();
  if (sb->launched.supervisor.running()) (void)sb->launched.supervisor.wait_for(std::chrono::milliseconds(2000));
  { linux::Launched gone = std::move(sb->launched); }  // killed and reaped, if it still runs
  return sb->cg.release();
}

// Discards still under way, which the executor's destructor waits for.
struct Pending {
  std::mutex mu;
  std::condition_variable cv;
  int count = 0;
  void wait_none() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return count == 0; });
  }
};

// The same, for a sandbox that waited and will never run a command (a stop, a close): its
// supervisor is told to end now, and the waiting for it and the cgroup's removal happen on the
// warmer's thread, so a session's close (its last receipt) does not wait for them; the
// executor's destructor does.
void discard_later(std::optional<Sandbox> sb, const std::shared_ptr<Pending>& pending) {
  if (!sb) return;
  sb->launched.go.reset();
  sb->launched.command.reset();
  auto held = std::make_shared<std::optional<Sandbox>>(std::move(sb));
  {
    std::lock_guard lock(pending->mu);
    ++pending->count;
  }
  auto finished = [pending] {
    std::lock_guard lock(pending->mu);
    --pending->count;
    pending->cv.notify_all();
  };
  try {
    Warmer::get().post([held, finished] {
      (void)discard(std::move(*held));
      finished();
    });
  } catch (...) {
    (void)discard(std::move(*held));
    finished();
  }
}

class ProcessExecutor final : public Executor {
 public:
  ProcessExecutor(const plan::ExecutionPlan& plan, SessionDirs dirs, std::string session_id, std::string workspace,
                  DoorStarter door)
      : plan_(plan), dirs_(std::move(dirs)), session_id_(std::move(session_id)), workspace_(std::move(workspace)),
        door_(std::move(door)) {}

  ~ProcessExecutor() override {
    std::optional<Sandbox> warm;
    {
      std::unique_lock lock(warm_mu_);
      keep_warm_ = false;
      warm_cv_.wait(lock, [&] { return !warming_; });
      warm = std::move(warm_);
      warm_.reset();
    }
    discard_later(std::move(warm), pending_);
    pending_->wait_none();  // nothing of a sandbox outlives its executor
  }

  void wait_discarded() override { pending_->wait_none(); }

  void keep_warm(bool on) override {
    {
      std::lock_guard lock(warm_mu_);
      keep_warm_ = on;
    }
    if (on) build_ahead();
  }

  Result<void> prepare() {
    steps_ = TRY(steps_of(plan_.confinement));
    inside_ = steps_.sandbox ? workspace_inside(workspace_) : dirs_.view;
    if (steps_.door && !door_)
      return fail(Code::ExecutorUnavailable, "the plan has a network door, but nothing here can serve it",
                  {{"executor", policy::to_string(plan_.executor())}});
    Enforced& e = enforced_;
    e.executor = plan_.executor();
    e.tier = plan_.tier();
    if (steps_.landlock) {
      landlock_ = TRY(linux::prepare_landlock(*steps_.landlock, {dirs_.view, dirs_.scratch}));
      // Without a /proc of its own, each command reads its own /proc/<pid> (LaunchSpec::landlock_own_proc).
      if (!steps_.sandbox)
        landlock_.applied.rules.push_back({"/proc/self (each command's own /proc/<pid>, added by the command)",
                                           plan::Access::Read, {"read_file", "read_dir"}});
      e.landlock = landlock_.applied;
    }
    if (steps_.seccomp) {
      seccomp_ = TRY(linux::prepare_seccomp(*steps_.seccomp));
      e.seccomp = seccomp_->applied;
    }
    if (steps_.sandbox) {
      std::string root = dirs_.root + "/root";
      if (::mkdir(root.c_str(), 0700) < 0 && errno != EEXIST)
        return fail_errno(Code::ExecutorUnavailable, "mkdir " + root, errno);
      mounts_ = TRY(linux::prepare_mounts(steps_.sandbox->namespaces, root, dirs_.view, dirs_.scratch, inside_,
                                          dirs_.view_read_only));
      id_maps_ = linux::prepare_id_maps(::getuid(), ::getgid());
      e.namespaces = NamespacesEnforced{
          .created = {std::begin(linux::kSandboxNamespaces), std::end(linux::kSandboxNamespaces)},
          .uid_map = id_maps_.uid_map,
          .mounts = mounts_.applied,
          .hostname = steps_.sandbox->namespaces.hostname};
      e.cgroup = steps_.sandbox->cgroup;
    }
    rlimits_ = linux::prepare_rlimits(plan_.limits);
    e.rlimits = rlimits_.applied;
    e.no_new_privs = confined();
    e.capabilities_dropped = plan_.drops_capabilities();
    e.process_limit = plan_.limits.process_mechanism;
    e.wall_timeout_ms = plan_.limits.wall_timeout_ms;
    e.network = plan_.host_network() ? NetworkEnforced::Host : steps_.door ? NetworkEnforced::Door : NetworkEnforced::None;
    if (steps_.door) e.door = *steps_.door;
    return {};
  }

  const Enforced& enforced() const override { return enforced_; }

  // Whatever the run's end (a command that could not start included), the next command's
  // sandbox is built ahead when the session asks for it.
  Result<RunOutcome> run(const Command& cmd) override {
    auto out = run(cmd, true);
    build_ahead();
    return out;
  }

  // `may_take_warm`: false for the one run again after a sandbox built ahead was lost, which is
  // built on demand, so a command is never run a third time.
  Result<RunOutcome> run(const Command& cmd, bool may_take_warm) {
    if (cmd.argv.empty()) return fail(Code::PolicyInvalid, "no command to run");
    linux::LaunchSpec spec = session_spec();
    spec.path = TRY(resolve_program(cmd.argv[0], dirs_.view));
    spec.argv = cmd.argv;
    spec.cwd = TRY(visible_path(cmd.cwd));
    spec.env = environment(spec.cwd);
    spec.env.insert(spec.env.end(), cmd.env.begin(), cmd.env.end());
    std::erase_if(spec.env, [&](const std::string& kv) {
      std::string_view name = std::string_view(kv).substr(0, kv.find('='));
      return std::find(cmd.scrub_env.begin(), cmd.scrub_env.end(), name) != cmd.scrub_env.end();
    });
    if (cmd.timeout_ms && (*cmd.timeout_ms < spec.wall_timeout_ms || spec.wall_timeout_ms == 0))
      spec.wall_timeout_ms = *cmd.timeout_ms;
    spec.stdin_fd = cmd.stdin_fd;
    spec.stdout_fd = cmd.stdout_fd;
    spec.stderr_fd = cmd.stderr_fd;
    spec.fd3 = cmd.pass_fd;
    if (cmd.private_dirs) {
      std::string scratch = steps_.sandbox ? "/tmp" : dirs_.scratch;
      for (const char* var : {"TMPDIR", "HOME"}) {
        std::string dir = fmt::format("{}/{}.{}", scratch, var == std::string_view("HOME") ? "home" : "tmp", runs_ + 1);
        std::string prefix = std::string(var) + "=";
        std::erase_if(spec.env, [&](const std::string& kv) { return kv.starts_with(prefix); });
        spec.env.push_back(prefix + dir);
        spec.make_dirs.push_back(std::move(dir));
      }
    }

    ++runs_;
    // The sandbox built ahead for this command, if one waits; else one built now.
    std::optional<Sandbox> sb = may_take_warm ? take_warm() : std::nullopt;
    bool built_ahead = sb.has_value();

    {
      // Output cannot exist before the launch, so no stop_run() for this run can come earlier.
      std::lock_guard lock(mu_);
      run_stop_requested_ = false;
    }
    // A terminal the command inherits gets its modes back however the command ends.
    auto terminal = linux::TerminalModes::prepare({spec.stdin_fd < 0 ? 0 : spec.stdin_fd,
                                                   spec.stdout_fd < 0 ? 1 : spec.stdout_fd,
                                                   spec.stderr_fd < 0 ? 2 : spec.stderr_fd});
    auto t0 = std::chrono::steady_clock::now();
    if (built_ahead) {
      if (auto started = linux::start_warm(sb->launched, spec); !started) {
        (void)discard(std::move(sb));
        // A command it cannot carry is refused as it is; a sandbox lost before its command (its
        // supervisor gone) is replaced by one built now.
        if (started.error().code != Code::ExecutorUnavailable) return std::unexpected(started.error());
        built_ahead = false;
      }
    }
    if (!built_ahead) sb = TRY(launch_sandbox(spec));
    linux::Launched& launched = sb->launched;
    linux::PreparedCgroup& cg = sb->cg;
    {
      std::lock_guard lock(mu_);
      running_ = &launched;
      running_cg_ = &cg;
      if (stop_requested_ || run_stop_requested_) (void)linux::stop(launched);
    }
    // The door serves from before the command exists until after it has ended. If it cannot
    // start, the command is stopped and the run refused: never a run whose door is missing.
    std::shared_ptr<void> door_serving;
    std::optional<Error> door_failed;
    if (steps_.door) {
      auto listener = linux::receive_door_listener(sb->door.outside.get());
      if (listener) {
        auto served = door_(std::move(*listener));
        if (served)
          door_serving = std::move(*served);
        else
          door_failed = served.error();
      } else {
        door_failed = listener.error();
      }
      if (door_failed) (void)linux::stop(launched);
    }
    auto rep = linux::wait_report(launched);
    terminal.release();
    door_serving.reset();
    {
      std::lock_guard lock(mu_);
      running_ = nullptr;
      running_cg_ = nullptr;
    }
    if (built_ahead && rep && rep->lost) {
      // Its init was gone before it took the command: the command never ran. It runs once more,
      // in a sandbox built now, unless a stop came meanwhile.
      (void)discard(std::move(sb));
      bool stopping;
      {
        std::lock_guard lock(mu_);
        stopping = stop_requested_ || run_stop_requested_;
      }
      if (stopping) return fail(Code::ExecutorUnavailable, "the sandbox built ahead was lost before its command, "
                                                           "and the run was stopped before another was built");
      --runs_;
      return run(cmd, false);
    }
    auto t_end = std::chrono::steady_clock::now();
    auto released = cg.release();
    bool mounts_gone = !steps_.sandbox || !mounted_on_host(dirs_.root + "/root");
    double teardown_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_end).count();
    if (!released) return std::unexpected(released.error());
    if (!mounts_gone)
      return fail(Code::ExecutorUnavailable, "the sandbox's root is still mounted on the host after teardown");
    if (!rep) return std::unexpected(rep.error());
    if (door_failed && !rep->setup_failed) {
      Error e = *door_failed;
      e.code = Code::ExecutorUnavailable;
      e.message = "the network door could not start: " + e.message;
      return std::unexpected(std::move(e));
    }
    if (rep->setup_failed) {
      auto step = linux::to_string(rep->step);
      Error e = rep->step == linux::Step::Exec
                    ? command_not_started(spec.path, fmt::format("cannot execute {}", spec.path), rep->err)
                    : fail_errno(Code::ExecutorUnavailable,
                                 fmt::format("the {} executor failed to apply step {}",
                                             policy::to_string(plan_.executor()), step),
                                 rep->err)
                          .error();
      e.facts["step"] = step;
      return std::unexpected(std::move(e));
    }
    RunOutcome out;
    out.program = spec.path;
    out.status.signaled = !rep->exited;
    out.status.code = rep->exit_code;
    out.status.signal = rep->signal;
    out.timed_out = rep->timed_out;
    out.stopped = rep->stopped;
    out.descendants_killed = rep->descendants_killed;
    out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    out.user_us = rep->user_us;
    out.system_us = rep->system_us;
    out.max_rss_kb = rep->max_rss_kb;
    out.supervisor_limits_changed = linux::rlimit_names(rep->supervisor_limits_changed);
    out.teardown_ms = teardown_ms;
    out.teardown_verified = true;
    out.built_ahead = built_ahead;
    return out;
  }

  void stop() override {
    {
      std::lock_guard lock(mu_);
      stop_requested_ = true;
      if (running_) (void)linux::stop(*running_);
    }
    std::optional<Sandbox> warm;
    {
      std::lock_guard lock(warm_mu_);
      keep_warm_ = false;
      warm = std::move(warm_);
      warm_.reset();
    }
    discard_later(std::move(warm), pending_);
  }

  void stop_run() override {
    std::lock_guard lock(mu_);
    run_stop_requested_ = true;
    if (running_) (void)linux::stop(*running_);
  }

  Json usage_now() override {
    std::lock_guard lock(mu_);
    if (!running_) return nullptr;
    linux::CgroupUsage u = running_cg_ ? linux::cgroup_usage(*running_cg_) : linux::CgroupUsage{};
    auto put = [](const std::optional<uint64_t>& v) { return v ? Json(*v) : Json(nullptr); };
    return {{"memory_bytes", put(u.memory_bytes)}, {"processes", put(u.processes)}, {"cpu_us", put(u.cpu_us)}};
  }

 private:
  // What every sandbox of this session is given, whichever command it runs.
  linux::LaunchSpec session_spec() const {
    linux::LaunchSpec spec;
    if (steps_.sandbox) {
      spec.mounts = &mounts_;
      spec.id_maps = &id_maps_;
      spec.hostname = steps_.sandbox->namespaces.hostname;
    }
    spec.drop_capabilities = plan_.drops_capabilities();
    spec.rlimits = &rlimits_;
    spec.landlock_ruleset = landlock_.ruleset.get();
    spec.landlock_own_proc = !steps_.sandbox;
    spec.seccomp = seccomp_ ? &seccomp_->fprog : nullptr;
    spec.no_new_privs = confined();
    spec.wall_timeout_ms = plan_.limits.wall_timeout_ms;
    spec.kill_grace_ms = plan_.limits.kill_grace_ms;
    if (steps_.door) {
      spec.door_address = steps_.door->address;
      spec.door_port = static_cast<uint16_t>(steps_.door->port);
    }
    return spec;
  }

  // Makes a sandbox's cgroup and door channel and launches it: `spec` with the command (built on
  // demand) or `spec.warm` (built ahead; the command comes with start_warm).
  Result<Sandbox> launch_sandbox(linux::LaunchSpec& spec) {
    Sandbox sb;
    // The namespaces tier limits the sandbox as a whole; root on the Landlock tier, where
    // RLIMIT_NPROC does not bind, gets a pids cgroup per run.
    std::string cg_name = fmt::format("airlock-{}-{}", session_id_, ++sandboxes_);
    if (steps_.sandbox) {
      plan::CgroupPlan c = steps_.sandbox->cgroup;
      c.pids_max += 2;  // the supervisor and the namespace's init
      sb.cg = TRY(linux::prepare_sandbox_cgroup(c, cg_name));
    } else if (plan_.limits.process_mechanism != plan::ProcessLimitMechanism::RlimitNproc) {
      sb.cg = TRY(linux::prepare_pids_cgroup(plan_.limits.process_mechanism, cg_name,
                                             plan_.limits.max_processes + 1 /* the supervisor */));
    }
    for (size_t i = 0; i < sb.cg.procs.size() && i < spec.cgroup_procs.size(); ++i)
      spec.cgroup_procs[i] = sb.cg.procs[i].get();
    if (steps_.door) {
      auto channel = linux::prepare_door_channel();
      if (!channel) {
        (void)sb.cg.release();
        return std::unexpected(channel.error());
      }
      sb.door = std::move(*channel);
      spec.door_channel = sb.door.inside.get();
    }
    auto launched = linux::launch(spec);
    sb.door.inside.reset();  // the init's now: EOF on ours if it ends before sending
    if (!launched) {
      (void)sb.cg.release();
      return std::unexpected(launched.error());
    }
    sb.launched = std::move(*launched);
    return sb;
  }

  // The sandbox built ahead, once its build has finished; none when none was asked for, its
  // build failed (the command then builds its own, and meets the same failure by name) or it
  // is gone.
  std::optional<Sandbox> take_warm() {
    std::optional<Sandbox> sb;
    {
      std::unique_lock lock(warm_mu_);
      warm_cv_.wait(lock, [&] { return !warming_; });
      sb = std::move(warm_);
      warm_.reset();
    }
    if (sb && !linux::waiting(sb->launched)) {
      (void)discard(std::move(sb));
      return std::nullopt;
    }
    return sb;
  }

  // Builds the next command's sandbox on the warmer's thread, when asked to keep one warm.
  void build_ahead() {
    std::unique_lock lock(warm_mu_);
    if (!keep_warm_ || warming_ || warm_) return;
    warming_ = true;
    lock.unlock();
    auto done = [this] {
      std::lock_guard done_lock(warm_mu_);
      warming_ = false;
      warm_cv_.notify_all();
    };
    try {
      Warmer::get().post([this, done, pending = pending_] {
        std::optional<Sandbox> unwanted;
        try {
          linux::LaunchSpec spec = session_spec();
          spec.warm = true;
          auto built = launch_sandbox(spec);
          std::lock_guard job_lock(warm_mu_);
          if (built && keep_warm_)
            warm_ = std::move(*built);
          else if (built)
            unwanted = std::move(*built);  // stopped meanwhile
        } catch (...) {  // no memory: no sandbox built ahead, the command builds its own
        }
        // Counted before warming_ clears, so the destructor, which waits for both, waits for it.
        discard_later(std::move(unwanted), pending);
        done();  // after this, nothing of `this`
      });
    } catch (...) {  // no thread or no memory for the job: none is built ahead
      done();
    }
  }

  bool confined() const { return !std::holds_alternative<plan::HostTierPlan>(plan_.confinement); }

  // Whether anything is mounted at or below `path` in our (the host's) mount namespace.
  static bool mounted_on_host(const std::string& path) {
    auto text = read_file("/proc/self/mountinfo");
    return !text || text->find(" " + path) != std::string::npos;
  }

  Result<std::string> visible_path(const std::string& host) const {
    return steps_.sandbox ? sandbox_path(host, dirs_, inside_) : sandbox_path(host, dirs_, std::nullopt);
  }

  std::vector<std::string> environment(const std::string& pwd) const {
    auto env = sandbox_environment(plan_, inside_, steps_.sandbox ? "/tmp" : dirs_.scratch, pwd, session_id_);
    if (steps_.door)
      for (auto& v : steps_.door->environment()) env.push_back(std::move(v));
    return env;
  }

  plan::ExecutionPlan plan_;
  Steps steps_;  // into plan_
  SessionDirs dirs_;
  std::string session_id_;
  std::string workspace_;
  DoorStarter door_;
  std::string inside_;  // where the view is, as the command sees it
  linux::MountProgram mounts_;
  linux::IdMaps id_maps_;
  Enforced enforced_;
  linux::PreparedLandlock landlock_;
  std::unique_ptr<linux::PreparedSeccomp> seccomp_;
  linux::RlimitSet rlimits_;
  int runs_ = 0;
  std::mutex mu_;
  linux::Launched* running_ = nullptr;
  const linux::PreparedCgroup* running_cg_ = nullptr;  // the running command's, while running_ is
  bool stop_requested_ = false;
  bool run_stop_requested_ = false;  // stop_run(): this run only
  std::atomic<int> sandboxes_ = 0;  // names each sandbox's cgroup
  // The sandbox built ahead (keep_warm): at most one, waiting for the next command.
  std::mutex warm_mu_;
  std::condition_variable warm_cv_;
  bool keep_warm_ = false, warming_ = false;
  std::optional<Sandbox> warm_;
  std::shared_ptr<Pending> pending_ = std::make_shared<Pending>();
};

}  // namespace

Result<std::unique_ptr<Executor>> make_process_executor(const plan::ExecutionPlan& plan, const SessionDirs& dirs,
                                                        const std::string& session_id, const std::string& workspace,
                                                        DoorStarter door) {
  auto ex = std::make_unique<ProcessExecutor>(plan, dirs, session_id, workspace, std::move(door));
  TRY(ex->prepare());
  return std::unique_ptr<Executor>(std::move(ex));
}

}  // namespace airlock::exec
