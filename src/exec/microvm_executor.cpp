// The microvm executor: the command runs in a guest kernel of its own. Each run gets a fresh
// guest of QEMU (-M microvm, no network device, -sandbox on), used for that run alone; QEMU is the
// command of a namespaces-tier executor of its own, so a bug in QEMU meets a second wall. The
// guest sees /usr read-only, the view at the workspace's path and the scratch directory at /tmp,
// each over virtio-9p; its agent (vm/guest_agent.c) waits for a go byte on a fourth serial port,
// reads the request from a control directory in the scratch directory, writes the command's
// stdout and stderr to two virtio serial ports and its end to a third. Guests may be booted
// ahead (the guest plan's pool), so the go byte is what starts a run. Write-back is the view's, as on
// every tier.
#include "exec/microvm_executor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <tuple>
#include <variant>

#include <fmt/format.h>

#include "base/fs.h"
#include "base/hash.h"
#include "base/unique_fd.h"

namespace airlock::exec {
namespace {

// What the guest gets of stdin and fd 3 at most: they are copied into the control directory.
constexpr size_t kMaxStdinBytes = 64u << 20;
constexpr size_t kMaxStatusBytes = 256;
// How long a guest may take from QEMU's start to its agent's ready byte (TCG on a loaded host
// boots in seconds; a guest past this is stopped and refused by name).
constexpr std::chrono::seconds kBootLimit{120};

// QEMU's option syntax separates with commas; a comma in a value is written twice.
std::string qemu_escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    out += c;
    if (c == ',') out += ',';
  }
  return out;
}

Result<std::string> read_fd_to_end(int fd, const std::string& what) {
  std::string data;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno(Code::ExecutorUnavailable, "read " + what, errno);
    if (n == 0) return data;
    data.append(buf, n);
    if (data.size() > kMaxStdinBytes)
      return fail(Code::LimitExceeded, fmt::format("{} is larger than the {} bytes a guest is given", what, kMaxStdinBytes),
                  {{"limit_bytes", kMaxStdinBytes}});
  }
}

// Copies QEMU's stdout and stderr pipes to the command's own descriptors until QEMU has ended,
// then drains what is left. A relay, not the descriptors themselves: QEMU (confined by Landlock)
// opens its chardevs by path, which a terminal or a file outside the sandbox's paths would refuse.
// It never waits for end of file: a sandbox started meanwhile on another thread (a pooled guest
// booting) holds copies of the write ends until it ends itself.
class Relay {
 public:
  Relay(int out_rd, int err_rd, int out_to, int err_to) : done_(::eventfd(0, EFD_CLOEXEC)) {
    thread_ = std::thread([this, out_rd, err_rd, out_to, err_to] {
      pollfd p[3] = {{out_rd, POLLIN, 0}, {err_rd, POLLIN, 0}, {done_.get(), POLLIN, 0}};
      int to[2] = {out_to, err_to};
      char buf[65536];
      auto copy = [&](int i) {
        ssize_t n = ::read(p[i].fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) return true;
        if (n <= 0) {
          p[i].fd = -1;
          return false;
        }
        // A reader that went away (EPIPE) drops the rest; QEMU is not stalled by it.
        if (to[i] >= 0) (void)write_all(to[i], std::string_view(buf, n), Code::ToolFailed, "relay");
        return true;
      };
      for (;;) {
        if (::poll(p, 3, -1) < 0) {
          if (errno == EINTR) continue;
          break;
        }
        if (p[2].revents) break;
        for (int i = 0; i < 2; ++i)
          if (p[i].fd >= 0 && p[i].revents) copy(i);
      }
      // QEMU has ended: everything it wrote is in the pipes.
      for (int i = 0; i < 2; ++i) {
        if (p[i].fd < 0) continue;
        (void)::fcntl(p[i].fd, F_SETFL, O_NONBLOCK);
        while (copy(i)) {
        }
      }
    });
  }
  ~Relay() { finish(); }
  // QEMU has ended: drain and stop.
  void finish() {
    if (!thread_.joinable()) return;
    uint64_t one = 1;
    (void)!::write(done_.get(), &one, sizeof one);
    thread_.join();
  }

 private:
  UniqueFd done_;
  std::thread thread_;
};

std::pair<UniqueFd, UniqueFd> pipe_pair() {
  int p[2] = {-1, -1};
  if (::pipe2(p, O_CLOEXEC) < 0) return {};
  return {UniqueFd(p[0]), UniqueFd(p[1])};
}

// One guest: QEMU booted in a namespaces-tier sandbox of its own, its agent waiting for the go
// byte before it reads its request. Used for exactly one command and then gone: a guest is never
// reused, pooled or not.
struct Guest {
  std::unique_ptr<Executor> sandbox;
  std::string ctl_name, ctl;  // the control directory: its name in the guest's /tmp, its host path
  UniqueFd go, out, err, status;  // host ends: QEMU's stdin (the go byte), the three serial ports
  std::future<Result<RunOutcome>> ended;  // QEMU's run, on a thread of its own

  bool alive() const {
    return ended.valid() && ended.wait_for(std::chrono::seconds(0)) == std::future_status::timeout;
  }
  ~Guest() {
    if (sandbox && ended.valid()) {
      sandbox->stop();
      ended.wait();
    }
    if (!ctl.empty()) (void)remove_tree(ctl);
  }
};

class MicrovmExecutor final : public Executor {
 public:
  MicrovmExecutor(const plan::ExecutionPlan& plan, SessionDirs dirs, std::string session_id, std::string workspace)
      : plan_(plan), dirs_(std::move(dirs)), session_id_(std::move(session_id)), workspace_(std::move(workspace)) {
    inside_ = workspace_inside(workspace_);
  }
  ~MicrovmExecutor() override { stop_pool(); }

  Result<void> prepare() {
    tier_ = std::get_if<plan::MicrovmTierPlan>(&plan_.confinement);
    if (!tier_)
      return fail(Code::InternalError, fmt::format("the microvm executor was given a plan of the {} tier",
                                                   policy::to_string(plan_.executor())));
    const plan::MicrovmPlan& vm = tier_->guest;
    // QEMU's own plan: the namespaces tier with the sandbox the planner sized for QEMU.
    qemu_plan_ = plan_;
    qemu_plan_.confinement = plan::NamespacesTierPlan{tier_->qemu, std::nullopt};
    // The command's wall time is kept from the host, from the moment the guest is told to go
    // (run() below): a pooled guest's QEMU started long before its command.
    qemu_plan_.limits.wall_timeout_ms = 0;
    // The guest agent refuses a request without a process limit; refused here first, before a guest boots.
    if (vm.max_processes == 0)
      return fail(Code::ExecutorUnavailable, "a microvm plan without the guest's process limit");
    // QEMU's own confinement: the same plan as the namespaces tier (the planner sized its cgroup
    // and limits for QEMU). Prepared once here so a tier that cannot prepare is refused now;
    // every guest then gets a sandbox of its own.
    auto probe = TRY(make_executor(qemu_plan_, dirs_, session_id_, workspace_));
    // QEMU's confinement, and the guest's on top; the command's wall time is kept from the host.
    enforced_ = probe->enforced();
    enforced_.executor = plan_.executor();
    enforced_.tier = plan_.tier();
    enforced_.wall_timeout_ms = plan_.limits.wall_timeout_ms;
    enforced_.network = NetworkEnforced::NoGuestDevice;
    enforced_.microvm = MicrovmEnforced{.acceleration = vm.acceleration,
                                        .memory_mb = vm.memory_mb,
                                        .vcpus = vm.vcpus,
                                        .kernel_sha256 = vm.kernel_sha256,
                                        .initramfs_sha256 = vm.initramfs_sha256,
                                        .pool = vm.pool,
                                        .guest_pids_max = vm.max_processes};
    if (vm.pool > 0) refill_ = std::thread([this] { refill(); });
    return {};
  }

  const Enforced& enforced() const override { return enforced_; }

  Result<RunOutcome> run(const Command& cmd) override {
    if (cmd.argv.empty()) return fail(Code::PolicyInvalid, "no command to run");
    if (stopped_) return fail(Code::SessionKilled, "the executor was stopped");
    std::string program = TRY(resolve_program(cmd.argv[0], dirs_.view));
    std::string cwd = TRY(sandbox_path(cmd.cwd, dirs_, inside_));

    // The request first, so a failure here costs no guest.
    std::string request;
    auto put = [&](std::string_view key, std::string_view value) {
      request.append(key);
      request += '\0';
      request.append(value);
      request += '\0';
    };
    put("argv", program);
    for (size_t i = 1; i < cmd.argv.size(); ++i) put("argv", cmd.argv[i]);
    for (const auto& e : sandbox_environment(plan_, inside_, "/tmp", cwd, session_id_)) put("env", e);
    for (const auto& e : cmd.env) put("env", e);
    put("cwd", cwd);
    put("workdir", inside_);
    put("cpu_seconds", std::to_string(tier_->guest.cpu_seconds));
    put("max_processes", std::to_string(tier_->guest.max_processes));
    put("nofile", std::to_string(plan_.limits.max_open_files));
    put("fsize", std::to_string(plan_.limits.max_file_bytes));
    // stdin crosses as a file; a terminal never ends, and the guest gets none of the host's
    // terminals (nothing to inject input into), so a terminal is an empty stdin.
    std::string stdin_data, fd3_data;
    int in = cmd.stdin_fd >= 0 ? cmd.stdin_fd : 0;
    if (!::isatty(in)) stdin_data = TRY(read_fd_to_end(in, "the command's stdin"));
    if (cmd.pass_fd >= 0) {
      fd3_data = TRY(read_fd_to_end(cmd.pass_fd, "the descriptor passed as fd 3"));
      put("fd3", "fd3");
    }

    // A pooled guest that is still waiting, else one booted now.
    std::unique_ptr<Guest> g = take_pooled();
    bool pooled = g != nullptr;
    if (!g) g = TRY(boot());
    {
      std::lock_guard lk(mu_);
      current_ = g.get();
    }
    struct Forget {
      MicrovmExecutor* self;
      ~Forget() {
        std::lock_guard lk(self->mu_);
        self->current_ = nullptr;
      }
    } forget{this};
    if (stopped_) return fail(Code::SessionKilled, "the executor was stopped");
    if (cmd.pass_fd >= 0) TRY(write_file_atomic(g->ctl + "/fd3", fd3_data, 0600));
    TRY(write_file_atomic(g->ctl + "/stdin", stdin_data, 0600));
    TRY(write_file_atomic(g->ctl + "/request", request, 0600));

    // The agent says ready (one byte on the status port) before it waits for go: the command's
    // wall time never counts a boot. What else the port held (an agent that failed first) is the
    // start of the status.
    std::string early = TRY(await_ready(*g));
    bool ready = early.starts_with('r');
    if (ready) early.erase(0, 1);

    auto t0 = std::chrono::steady_clock::now();
    Relay relay(g->out.get(), g->err.get(), cmd.stdout_fd >= 0 ? cmd.stdout_fd : 1,
                cmd.stderr_fd >= 0 ? cmd.stderr_fd : 2);
    if (ready) TRY(write_all(g->go.get(), "g", Code::ExecutorUnavailable, "the guest's go port"));
    g->go.reset();
    // The command's wall time, from now (a pooled guest's QEMU started long before): past it, QEMU
    // is killed from the host.
    uint64_t timeout_ms = plan_.limits.wall_timeout_ms;
    if (cmd.timeout_ms && (*cmd.timeout_ms < timeout_ms || timeout_ms == 0)) timeout_ms = *cmd.timeout_ms;
    bool timed_out = false;
    if (timeout_ms > 0 && g->ended.wait_for(std::chrono::milliseconds(timeout_ms)) == std::future_status::timeout) {
      timed_out = true;
      g->sandbox->stop_run();
    }
    auto ran = g->ended.get();
    relay.finish();
    if (!ran) return std::unexpected(ran.error());
    RunOutcome out = *ran;
    out.program = program;
    out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (timed_out) {
      out.timed_out = true;
      out.stopped = false;
    }
    if (out.timed_out || out.stopped || out.budget_exhausted) return out;

    std::string status = std::move(early);
    {
      (void)::fcntl(g->status.get(), F_SETFL, O_NONBLOCK);
      char buf[kMaxStatusBytes];
      ssize_t n = ::read(g->status.get(), buf, sizeof buf);
      if (n > 0) status.append(buf, n);
    }
    auto number = [](std::string_view s) -> std::optional<int> {
      int v = 0;
      while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (ec != std::errc() || p != s.data() + s.size() || v < 0 || v > 255) return std::nullopt;
      return v;
    };
    if (status.starts_with("exit ")) {
      if (auto v = number(std::string_view(status).substr(5))) {
        out.status = {false, *v, 0};
        return out;
      }
    } else if (status.starts_with("signal ")) {
      if (auto v = number(std::string_view(status).substr(7))) {
        out.status = {true, 0, *v};
        return out;
      }
    }
    std::string console;
    if (auto c = read_file(g->ctl + "/console"); c) console = c->substr(c->size() > 2000 ? c->size() - 2000 : 0);
    return fail(Code::ExecutorUnavailable,
                status.starts_with("agent_error ")
                    ? fmt::format("the guest agent failed: {}", status.substr(12))
                    : fmt::format("the guest ended without reporting the command's end (QEMU status {})",
                                  ran->status.shell_status()),
                {{"qemu_status", ran->status.shell_status()}, {"guest_status", status}, {"console", console},
                 {"pooled", pooled}});
  }

  void stop() override {
    stopped_ = true;
    stop_pool();
    std::lock_guard lk(mu_);
    if (current_) current_->sandbox->stop();
  }
  void stop_run() override {
    std::lock_guard lk(mu_);
    if (current_) current_->sandbox->stop_run();
  }

 private:
  // Starts a guest: its control directory with the image staged, its sandbox, QEMU on a thread.
  Result<std::unique_ptr<Guest>> boot() {
    auto g = std::make_unique<Guest>();
    int n = ++guests_;
    g->ctl_name = fmt::format(".airlock-vm-{}", n);
    g->ctl = dirs_.scratch + "/" + g->ctl_name;
    TRY(remove_tree(g->ctl));
    if (::mkdir(g->ctl.c_str(), 0700) < 0) return fail_errno(Code::ExecutorUnavailable, "mkdir " + g->ctl, errno);
    TRY(stage_image(g->ctl));
    g->sandbox = TRY(make_executor(qemu_plan_, dirs_, fmt::format("{}-g{}", session_id_, n), workspace_));
    auto [go_rd, go_wr] = pipe_pair();
    auto [out_rd, out_wr] = pipe_pair();
    auto [err_rd, err_wr] = pipe_pair();
    auto [st_rd, st_wr] = pipe_pair();
    if (!go_rd || !out_rd || !err_rd || !st_rd) return fail_errno(Code::ExecutorUnavailable, "pipe", errno);
    g->go = std::move(go_wr);
    g->out = std::move(out_rd);
    g->err = std::move(err_rd);
    g->status = std::move(st_rd);
    Executor* sandbox = g->sandbox.get();
    std::vector<std::string> argv = qemu_argv(tier_->guest, inside_, g->ctl_name);
    g->ended = std::async(std::launch::async, [sandbox, argv = std::move(argv), go = std::move(go_rd),
                                               o = std::move(out_wr), e = std::move(err_wr),
                                               st = std::move(st_wr)]() mutable -> Result<RunOutcome> {
      Command q;
      q.argv = std::move(argv);
      q.stdin_fd = go.get();
      q.stdout_fd = o.get();
      q.stderr_fd = e.get();
      q.pass_fd = st.get();
      return sandbox->run(q);
    });
    return g;
  }

  // Waits for the agent's ready byte, bounded by kBootLimit; returns what the status port held
  // (empty if QEMU ended first). A guest that never gets ready is stopped and refused by name.
  Result<std::string> await_ready(Guest& g) {
    auto deadline = std::chrono::steady_clock::now() + kBootLimit;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{g.status.get(), POLLIN, 0};
      int rc = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0) return fail_errno(Code::ExecutorUnavailable, "poll the guest's status port", errno);
      if (rc == 0) {
        g.sandbox->stop_run();
        return fail(Code::ExecutorUnavailable,
                    fmt::format("the guest did not get ready within {} s", kBootLimit.count()),
                    {{"boot_limit_seconds", kBootLimit.count()}});
      }
      char buf[kMaxStatusBytes];
      ssize_t n = ::read(g.status.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      return std::string(buf, n > 0 ? static_cast<size_t>(n) : 0);
    }
  }

  std::unique_ptr<Guest> take_pooled() {
    std::unique_lock lk(mu_);
    while (!pool_.empty()) {
      std::unique_ptr<Guest> g = std::move(pool_.front());
      pool_.pop_front();
      wake_.notify_all();
      if (g->alive()) return g;
      lk.unlock();
      g.reset();  // it died waiting (its wall time, or a crash): destroyed, never used
      lk.lock();
    }
    return nullptr;
  }

  // Keeps the guest plan's pool of guests booted and waiting, until the executor stops.
  void refill() {
    std::unique_lock lk(mu_);
    while (!pool_stopping_) {
      if (pool_.size() >= tier_->guest.pool) {
        wake_.wait(lk);
        continue;
      }
      lk.unlock();
      auto g = boot();
      lk.lock();
      if (!g) {
        // Nothing to pool: calls boot their own guest (and meet the same error by name).
        wake_.wait_for(lk, std::chrono::seconds(5));
        continue;
      }
      pool_.push_back(std::move(*g));
    }
  }

  void stop_pool() {
    {
      std::lock_guard lk(mu_);
      pool_stopping_ = true;
      wake_.notify_all();
    }
    if (refill_.joinable()) refill_.join();
    std::deque<std::unique_ptr<Guest>> pool;
    {
      std::lock_guard lk(mu_);
      pool.swap(pool_);
    }
    pool.clear();  // each guest's sandbox stopped and its control directory removed
  }

  // Copies the image into the guest's control directory, checking the bytes copied against the
  // digests the plan recorded: what QEMU boots is what was checked, and a cache under /tmp (which
  // QEMU's namespace covers with the scratch directory) works as well as any other.
  Result<void> stage_image(const std::string& ctl) const {
    const plan::MicrovmPlan& vm = tier_->guest;
    for (auto [path, want, name] : {std::tuple{&vm.kernel, &vm.kernel_sha256, "vmlinux"},
                                    {&vm.initramfs, &vm.initramfs_sha256, "initramfs"}}) {
      auto bytes = read_file(*path, Code::ExecutorUnavailable);
      std::string got = bytes ? sha256_hex(*bytes) : std::string("unreadable");
      if (got != *want)
        return fail(Code::ExecutorUnavailable,
                    fmt::format("the guest image file {} does not match the digest the plan recorded", *path),
                    {{"file", *path}, {"expected_sha256", *want}, {"sha256", got}});
      TRY(write_file_atomic(ctl + "/" + name, *bytes, 0600));
    }
    return {};
  }

  plan::ExecutionPlan plan_;
  const plan::MicrovmTierPlan* tier_ = nullptr;  // into plan_, set by prepare()
  plan::ExecutionPlan qemu_plan_;                // the namespaces tier, for each guest's QEMU
  SessionDirs dirs_;
  std::string session_id_, workspace_, inside_;
  Enforced enforced_;
  std::atomic<int> guests_ = 0;
  std::atomic<bool> stopped_ = false;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Guest>> pool_;
  bool pool_stopping_ = false;
  Guest* current_ = nullptr;
  std::thread refill_;
};

}  // namespace

std::vector<std::string> qemu_argv(const plan::MicrovmPlan& vm, const std::string& inside, const std::string& ctl_name) {
  bool kvm = vm.acceleration == "kvm";
  std::string append = "console=ttyS0 quiet reboot=t panic=-1 rdinit=/init airlock_ctl=" + ctl_name;
  if (!kvm && vm.tsc_khz) append += fmt::format(" tsc_early_khz={}", vm.tsc_khz);
  if (vm.test_boot_delay_ms) append += fmt::format(" airlock_boot_delay_ms={}", vm.test_boot_delay_ms);
  std::vector<std::string> a = {
      vm.qemu, "-M", "microvm,acpi=off", "-accel", kvm ? "kvm" : "tcg,tb-size=64", "-cpu", kvm ? "host" : "max",
      "-m", std::to_string(vm.memory_mb), "-smp", std::to_string(vm.vcpus), "-nodefaults", "-no-user-config",
      "-display", "none", "-no-reboot", "-nic", "none",
      "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
      "-kernel", "/tmp/" + ctl_name + "/vmlinux", "-initrd", "/tmp/" + ctl_name + "/initramfs", "-append", append,
      "-serial", "file:/tmp/" + ctl_name + "/console",
      "-device", "virtio-serial-device",
      "-chardev", "file,id=out,path=/proc/self/fd/1", "-device", "virtserialport,chardev=out,nr=1",
      "-chardev", "file,id=err,path=/proc/self/fd/2", "-device", "virtserialport,chardev=err,nr=2",
      "-chardev", "file,id=status,path=/proc/self/fd/3", "-device", "virtserialport,chardev=status,nr=3",
      "-chardev", "stdio,id=go,signal=off", "-device", "virtserialport,chardev=go,nr=4"};
  auto share = [&](const std::string& id, const std::string& path, bool ro) {
    a.push_back("-fsdev");
    a.push_back(fmt::format("local,id={},path={},security_model=none{}", id, qemu_escape(path), ro ? ",readonly=on" : ""));
    a.push_back("-device");
    a.push_back(fmt::format("virtio-9p-device,fsdev={},mount_tag=airlock_{}", id, id));
  };
  share("usr", "/usr", true);
  share("work", inside, false);
  share("tmp", "/tmp", false);
  return a;
}

Result<std::unique_ptr<Executor>> make_microvm_executor(const plan::ExecutionPlan& plan, const SessionDirs& dirs,
                                                        const std::string& session_id, const std::string& workspace,
                                                        DoorStarter /* door: the tier has none */) {
  auto ex = std::make_unique<MicrovmExecutor>(plan, dirs, session_id, workspace);
  TRY(ex->prepare());
  return std::unique_ptr<Executor>(std::move(ex));
}

}  // namespace airlock::exec
