// The microvm executor: the command runs in a guest kernel of its own. Each run boots a fresh
// guest with QEMU (-M microvm, no network device, -sandbox on), and QEMU is the command of a
// namespaces-tier executor prepared from the same plan, so a bug in QEMU meets a second wall.
// The guest sees /usr read-only, the view at the workspace's path and the scratch directory at
// /tmp, each over virtio-9p; its agent (vm/guest_agent.c) reads the request from a control
// directory in the scratch directory, writes the command's stdout and stderr to two virtio
// serial ports and its end to a third. Write-back is the view's, as on every tier.
#include "exec/microvm_executor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <atomic>
#include <charconv>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "base/fs.h"
#include "base/hash.h"
#include "base/unique_fd.h"

namespace airlock::exec {
namespace {

// What the guest gets of stdin and fd 3 at most: they are copied into the control directory.
constexpr size_t kMaxStdinBytes = 64u << 20;
constexpr size_t kMaxStatusBytes = 256;

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

// Copies QEMU's stdout and stderr pipes to the command's own descriptors until both close. A
// relay, not the descriptors themselves: QEMU (confined by Landlock) opens its chardevs by path,
// which a terminal or a file outside the sandbox's paths would refuse.
class Relay {
 public:
  Relay(UniqueFd out_rd, UniqueFd err_rd, int out_to, int err_to)
      : thread_([this, o = std::move(out_rd), e = std::move(err_rd), out_to, err_to]() mutable {
          pollfd p[2] = {{o.get(), POLLIN, 0}, {e.get(), POLLIN, 0}};
          int to[2] = {out_to, err_to};
          char buf[65536];
          int open = 2;
          while (open > 0) {
            if (::poll(p, 2, -1) < 0) {
              if (errno == EINTR) continue;
              break;
            }
            for (int i = 0; i < 2; ++i) {
              if (p[i].fd < 0 || !p[i].revents) continue;
              ssize_t n = ::read(p[i].fd, buf, sizeof buf);
              if (n < 0 && errno == EINTR) continue;
              if (n <= 0) {
                p[i].fd = -1;
                --open;
                continue;
              }
              // A reader that went away (EPIPE) drops the rest; QEMU is not stalled by it.
              if (to[i] >= 0) (void)write_all(to[i], std::string_view(buf, n), Code::ToolFailed, "relay");
            }
          }
        }) {}
  ~Relay() { join(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::thread thread_;
};

class MicrovmExecutor final : public Executor {
 public:
  MicrovmExecutor(const plan::ExecutionPlan& plan, SessionDirs dirs, std::string session_id, std::string workspace)
      : plan_(plan), dirs_(std::move(dirs)), session_id_(std::move(session_id)), workspace_(std::move(workspace)) {
    inside_ = workspace_inside(workspace_);
  }

  Result<void> prepare() {
    if (!plan_.microvm) return fail(Code::ExecutorUnavailable, "a microvm plan without its guest");
    // QEMU's own confinement: the same plan as the namespaces tier (the planner sized its
    // cgroup and limits for QEMU).
    plan::ExecutionPlan qemu_plan = plan_;
    qemu_plan.executor = policy::ExecutorKind::Namespaces;
    qemu_plan.microvm.reset();
    qemu_ = TRY(make_executor(qemu_plan, dirs_, session_id_, workspace_));
    const auto& vm = *plan_.microvm;
    enforced_ = qemu_->enforced();
    enforced_["executor"] = "microvm";
    enforced_["tier"] = plan_.tier;
    enforced_["microvm"] = {{"acceleration", vm.acceleration},
                            {"memory_mb", vm.memory_mb},
                            {"vcpus", vm.vcpus},
                            {"kernel_sha256", vm.kernel_sha256},
                            {"initramfs_sha256", vm.initramfs_sha256},
                            {"network_devices", "none"},
                            {"qemu_sandbox", "-sandbox on (obsolete, elevateprivileges, spawn, resourcecontrol denied)"},
                            {"qemu_confined_by", "the namespaces tier (the rest of this record)"},
                            {"teardown", "one guest per run; QEMU is killed with the namespace's init"}};
    enforced_["network"] = "none (no network device in the guest)";
    return {};
  }

  const Json& enforced() const override { return enforced_; }

  Result<RunOutcome> run(const Command& cmd) override {
    if (cmd.argv.empty()) return fail(Code::PolicyInvalid, "no command to run");
    std::string program = TRY(resolve_program(cmd.argv[0], dirs_.view));
    std::string cwd = TRY(sandbox_path(cmd.cwd, dirs_, inside_));

    std::string ctl_name = fmt::format(".airlock-vm-{}", ++runs_);
    std::string ctl = dirs_.scratch + "/" + ctl_name;
    TRY(remove_tree(ctl));
    if (::mkdir(ctl.c_str(), 0700) < 0) return fail_errno(Code::ExecutorUnavailable, "mkdir " + ctl, errno);
    struct RemoveCtl {
      std::string path;
      ~RemoveCtl() { (void)remove_tree(path); }
    } remove_ctl{ctl};

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
    put("cpu_seconds", std::to_string(plan_.microvm->cpu_seconds));
    put("nofile", std::to_string(plan_.limits.max_open_files));
    put("fsize", std::to_string(plan_.limits.max_file_bytes));
    // stdin crosses as a file; a terminal never ends, and the guest gets none of the host's
    // terminals (nothing to inject input into), so a terminal is an empty stdin.
    std::string stdin_data;
    int in = cmd.stdin_fd >= 0 ? cmd.stdin_fd : 0;
    if (!::isatty(in)) stdin_data = TRY(read_fd_to_end(in, "the command's stdin"));
    if (cmd.pass_fd >= 0) {
      TRY(write_file_atomic(ctl + "/fd3", TRY(read_fd_to_end(cmd.pass_fd, "the descriptor passed as fd 3")), 0600));
      put("fd3", "fd3");
    }
    TRY(stage_image(ctl));
    TRY(write_file_atomic(ctl + "/request", request, 0600));
    TRY(write_file_atomic(ctl + "/stdin", stdin_data, 0600));

    int out_p[2], err_p[2];
    if (::pipe2(out_p, O_CLOEXEC) < 0) return fail_errno(Code::ExecutorUnavailable, "pipe", errno);
    UniqueFd out_rd(out_p[0]), out_wr(out_p[1]);
    if (::pipe2(err_p, O_CLOEXEC) < 0) return fail_errno(Code::ExecutorUnavailable, "pipe", errno);
    UniqueFd err_rd(err_p[0]), err_wr(err_p[1]);
    // The command's end comes on a third serial port, through QEMU's fd 3: nothing of it is in
    // the guest's /tmp (the agent removes the control directory once it has read it).
    int st_p[2];
    if (::pipe2(st_p, O_CLOEXEC) < 0) return fail_errno(Code::ExecutorUnavailable, "pipe", errno);
    UniqueFd st_rd(st_p[0]), st_wr(st_p[1]);
    UniqueFd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!devnull) return fail_errno(Code::ExecutorUnavailable, "open /dev/null", errno);
    Command q;
    q.argv = qemu_argv(*plan_.microvm, inside_, ctl_name);
    q.stdin_fd = devnull.get();
    q.stdout_fd = out_wr.get();
    q.stderr_fd = err_wr.get();
    q.timeout_ms = cmd.timeout_ms;
    q.pass_fd = st_wr.get();
    Relay relay(std::move(out_rd), std::move(err_rd), cmd.stdout_fd >= 0 ? cmd.stdout_fd : 1,
                cmd.stderr_fd >= 0 ? cmd.stderr_fd : 2);
    auto ran = qemu_->run(q);
    // The write ends close here; the relay ends when QEMU and its supervisor have let go too.
    out_wr.reset();
    err_wr.reset();
    st_wr.reset();
    relay.join();
    if (!ran) return std::unexpected(ran.error());
    RunOutcome out = *ran;
    out.program = program;
    if (out.timed_out || out.stopped || out.budget_exhausted) return out;

    std::string status;
    {
      char buf[kMaxStatusBytes];
      ssize_t n = ::read(st_rd.get(), buf, sizeof buf);
      if (n > 0) status.assign(buf, n);
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
    if (auto c = read_file(ctl + "/console"); c) console = c->substr(c->size() > 2000 ? c->size() - 2000 : 0);
    return fail(Code::ExecutorUnavailable,
                status.starts_with("agent_error ")
                    ? fmt::format("the guest agent failed: {}", status.substr(12))
                    : fmt::format("the guest ended without reporting the command's end (QEMU status {})",
                                  ran->status.shell_status()),
                {{"qemu_status", ran->status.shell_status()}, {"guest_status", status}, {"console", console}});
  }

  void stop() override { qemu_->stop(); }
  void stop_run() override { qemu_->stop_run(); }

 private:
  // Copies the image into the run's control directory, checking the bytes copied against the
  // digests the plan recorded: what QEMU boots is what was checked, and a cache under /tmp (which
  // QEMU's namespace covers with the scratch directory) works as well as any other.
  Result<void> stage_image(const std::string& ctl) const {
    const auto& vm = *plan_.microvm;
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
  SessionDirs dirs_;
  std::string session_id_, workspace_, inside_;
  std::unique_ptr<Executor> qemu_;
  Json enforced_;
  int runs_ = 0;
};

}  // namespace

std::vector<std::string> qemu_argv(const plan::MicrovmPlan& vm, const std::string& inside, const std::string& ctl_name) {
  bool kvm = vm.acceleration == "kvm";
  std::string append = "console=ttyS0 quiet reboot=t panic=-1 rdinit=/init airlock_ctl=" + ctl_name;
  if (!kvm && vm.tsc_khz) append += fmt::format(" tsc_early_khz={}", vm.tsc_khz);
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
      "-chardev", "file,id=status,path=/proc/self/fd/3", "-device", "virtserialport,chardev=status,nr=3"};
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
                                                        const std::string& session_id, const std::string& workspace) {
  auto ex = std::make_unique<MicrovmExecutor>(plan, dirs, session_id, workspace);
  TRY(ex->prepare());
  return std::unique_ptr<Executor>(std::move(ex));
}

}  // namespace airlock::exec
