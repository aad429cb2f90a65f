// `airlock vm build` (the guest image, into the cache) and `airlock vm verify` (the acceleration,
// measured by booting a guest, then the escape suite against that guest; a pass is recorded in
// the state directory, and only then is the microvm tier available on this host).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "base/fs.h"
#include "cli/verbs.h"
#include "exec/captured_run.h"
#include "exec/owned_executor.h"
#include "exec/planner.h"
#include "exec/vm_image.h"

namespace airlock::cli {
namespace {

struct VmOptions {
  int jobs = 0;
  bool force = false;
  std::string agent;
};

std::string beside_self(std::string_view name) {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  std::string self = n > 0 ? std::string(buf, n) : std::string();
  return self.substr(0, self.rfind('/') + 1) + std::string(name);
}

int vm_build(Globals& g, const VmOptions& o) {
  exec::BuildOptions b;
  b.dir = exec::vm_cache_dir();
  b.agent = o.agent.empty() ? beside_self(exec::kGuestAgentName) : o.agent;
  b.jobs = o.jobs > 0 ? o.jobs : static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  b.force = o.force;
  bool tty = ::isatty(2);
  std::string last_stage;
  b.progress = [&](std::string_view stage, std::string_view line) {
    if (g.json) return;
    // A terminal gets one line rewritten in place; a log gets each stage once, then every 100th object.
    static int n = 0;
    bool new_stage = stage != last_stage;
    last_stage = stage;
    if (tty) {
      std::fprintf(stderr, "\r\033[Kairlock vm build: %-9s %.*s%s", std::string(stage).c_str(),
                   static_cast<int>(std::min<size_t>(line.size(), 100)), line.data(), stage == "done" ? "\n" : "");
    } else if (new_stage || stage == "done" || ++n % 100 == 0) {
      std::fprintf(stderr, "airlock vm build: %s %.*s\n", std::string(stage).c_str(), static_cast<int>(line.size()),
                   line.data());
    }
  };
  auto img = exec::build_guest_image(b);
  if (tty && !g.json && last_stage != "done") std::fputc('\n', stderr);
  if (!img) return refuse(img.error(), g.json);
  if (g.json) std::printf("%s\n", img->to_json().dump(2).c_str());
  else
    std::printf("kernel     %s\n           sha256 %s\ninitramfs  %s\n           sha256 %s\n", img->kernel.c_str(),
                img->kernel_sha256.c_str(), img->initramfs.c_str(), img->initramfs_sha256.c_str());
  return 0;
}

// The policy verify boots guests under: untrusted code, the escape suite's defaults otherwise.
Result<policy::TaskPolicy> verify_policy() {
  return policy::parse_layer_text(R"({"schema_version":"airlock.task_policy.v1","workload":"untrusted_code",
                                      "limits":{"memory_mb":256,"command_timeout_seconds":20}})",
                                  policy::builtin_default(), "vm verify");
}

// Boots one guest with `accel` and runs /bin/true in it: the acceleration probe.
Result<void> boot_probe(const plan::HostFacts& facts, plan::Profile profile, const std::string& state,
                        uint64_t timeout_ms) {
  auto pol = TRY(verify_policy());
  auto ex = TRY(exec::open_owned_executor(pol, facts, profile, state));
  exec::Command cmd;
  cmd.argv = {"/bin/true"};
  cmd.timeout_ms = timeout_ms;
  auto r = TRY(exec::run_captured(*ex.executor, cmd, "", 1 << 16));
  if (r.outcome.timed_out)
    return fail(Code::ExecutorUnavailable, fmt::format("the guest did not finish /bin/true within {} ms", timeout_ms));
  if (r.outcome.status.shell_status() != 0)
    return fail(Code::ExecutorUnavailable,
                fmt::format("/bin/true in the guest ended with status {}: {}", r.outcome.status.shell_status(),
                            r.err_tail));
  return {};
}

int vm_verify(Globals& g) {
  auto profile = parse_profile(g.profile);
  if (!profile) return refuse(profile.error(), g.json);
  auto state = resolve_state_dir(g.state_dir);
  if (!state) return refuse(state.error(), g.json);
  auto img = exec::load_guest_image(exec::vm_cache_dir());
  if (!img) return refuse(img.error(), g.json);
  (void)::unlink(exec::vm_verification_path(*state).c_str());  // a failed verify leaves the tier unavailable

  plan::FactNeeds needs;
  needs.user_namespaces = needs.overlayfs = needs.cgroups = true;
  plan::HostFacts facts = exec::HostProbe(*state, exec::HostProbe::Measure::Fresh).facts(needs);
  facts.microvm = {img->kernel, img->kernel_sha256, img->initramfs, img->initramfs_sha256, "", true,
                   exec::probe_tsc_khz()};
  // Acceleration by booting, never by opening /dev/kvm: a paravirtual KVM opens and creates VMs
  // but cannot run a stock guest (it stops with an emulation error, so the boot times out).
  Json tried = Json::array();
  std::string accel;
  for (const char* a : {"kvm", "tcg"}) {
    struct stat st{};
    if (std::string_view(a) == "kvm" && ::stat("/dev/kvm", &st) < 0) {
      tried.push_back({{"acceleration", a}, {"booted", false}, {"why", "/dev/kvm does not exist"}});
      continue;
    }
    facts.microvm.acceleration = a;
    auto booted = boot_probe(facts, *profile, *state, std::string_view(a) == "kvm" ? 10000 : 30000);
    tried.push_back({{"acceleration", a}, {"booted", booted.has_value()},
                     {"why", booted ? std::string("/bin/true exited 0") : booted.error().message}});
    if (!g.json)
      std::fprintf(stderr, "airlock vm verify: %s: %s\n", a,
                   booted ? "a guest booted and ran /bin/true" : booted.error().message.c_str());
    if (booted) {
      accel = a;
      break;
    }
  }
  if (accel.empty())
    return refuse({Code::ExecutorUnavailable, "no acceleration booted the guest", {{"tried", tried}}}, g.json);

  escape::SuiteOptions so;
  so.state_dir = *state;
  so.profile = *profile;
  so.executor = policy::ExecutorKind::Microvm;
  so.microvm = facts.microvm;
  auto report = run_escape_suite(so, g.json);
  if (!report) return refuse(report.error(), g.json);
  print_escape_report(*report, g.json);
  if (!report->ok()) {
    std::fprintf(stderr, "airlock vm verify: the escape suite did not pass: the microvm tier stays unavailable\n");
    return 1;
  }
  Json summary = {{"acceleration_tried", tried}, {"uid", report->uid}, {"kernel", report->kernel}};
  for (const auto& t : report->tiers) summary["verdict"] = t.verdict();
  if (auto r = exec::record_vm_verification(*state, *img, accel, summary); !r) return refuse(r.error(), g.json);
  if (!g.json)
    std::fprintf(stderr, "airlock vm verify: passed with %s; recorded in %s\n", accel.c_str(),
                 exec::vm_verification_path(*state).c_str());
  return 0;
}

}  // namespace

void add_vm(CLI::App& app, Globals& g, Action& run) {
  static VmOptions o;
  auto* vm = app.add_subcommand("vm", "the microVM tier: build its guest image, verify it on this host");
  vm->require_subcommand(1);
  auto* build = vm->add_subcommand("build", "build the guest kernel and initramfs into the cache (reused when present)");
  build->add_option("--jobs", o.jobs, "parallel compile jobs (default: the number of CPUs)");
  build->add_flag("--force", o.force, "rebuild even when the cache holds this image");
  build->add_option("--agent", o.agent, "the static guest agent (default: airlock-guest-agent beside airlock)");
  build->add_flag("--json", g.json, "print the image as JSON");
  build->callback([&g, &run] { run = [&g] { return vm_build(g, o); }; });
  auto* verify = vm->add_subcommand(
      "verify", "boot a guest (KVM if it really works, else TCG) and run the escape suite against it; record a pass");
  verify->add_flag("--json", g.json, "print the escape suite's report as JSON");
  verify->callback([&g, &run] { run = [&g] { return vm_verify(g); }; });
}

}  // namespace airlock::cli
