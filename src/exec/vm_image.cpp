// Builds, caches and verifies the microVM guest image (kernel + initramfs).
#include "exec/vm_image.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <x86intrin.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "base/child_process.h"
#include "base/fs.h"
#include "base/hash.h"
#include "base/unique_fd.h"


namespace airlock::exec {
namespace {

constexpr std::string_view kGuestConfig =
#include "guest_config.inc"
    ;

// A newc cpio archive; `data` is a file's bytes or a symlink's target.
struct Cpio {
  std::string out;
  unsigned ino = 0;
  void entry(std::string_view name, unsigned mode, std::string_view data, unsigned rdev_major = 0,
             unsigned rdev_minor = 0) {
  out += fmt::format("070701{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}{:08X}", ++ino,
                     mode, 0, 0, 1, 0, data.size(), 0, 0, rdev_major, rdev_minor, name.size() + 1, 0);
  out += name;
  out += '\0';
  while (out.size() % 4) out += '\0';
  out += data;
  while (out.size() % 4) out += '\0';
  }
};

// The whole image's key: the kernel's and the agent's.
Result<std::string> image_key(const std::string& kernel, const BuildOptions& o) {
  auto agent = read_file(o.agent);
  if (!agent)
    return fail(Code::ConfigError, fmt::format("the guest agent {} is missing", o.agent), {{"agent", o.agent}});
  // The initramfs itself, not only the agent: a change to what else it holds makes a new image.
  return sha256_hex(fmt::format("airlock guest image 3\n{}\n{}\n", kernel, sha256_hex(make_initramfs(*agent))));
}

// Extracts linux-source into `work`, configures it (tinyconfig + the fragment, every line of which
// must survive) and builds vmlinux there. Its output goes to `log`.
Result<void> build_kernel(const BuildOptions& o, const std::string& work, int log) {
  auto say = [&](std::string_view stage, std::string_view line) {
    if (o.progress) o.progress(stage, line);
  };
  say("extract", fmt::format("extracting {}", o.linux_source));
  // Documentation is the biggest part of the tree; the build reads only its top-level files
  // (Kconfig sources Documentation/Kconfig), so everything beneath its subdirectories is left out.
  TRY(run_step({"tar", "-xJf", o.linux_source, "--strip-components=1", "--exclude=*/Documentation/*/*"}, work, log,
               nullptr));
  std::string config = work + "/airlock-guest.config";
  TRY(write_file_atomic(config, kGuestConfig));
  // A reproducible build: no timestamp, user or host of this machine in the kernel.
  ::setenv("KBUILD_BUILD_TIMESTAMP", "1970-01-01", 1);
  ::setenv("KBUILD_BUILD_USER", "airlock", 1);
  ::setenv("KBUILD_BUILD_HOST", "airlock", 1);
  ::setenv("KBUILD_BUILD_VERSION", "1", 1);
  say("configure", "tinyconfig + vm/guest.config");
  for (auto argv : {std::vector<std::string>{"make", "ARCH=x86_64", "tinyconfig"},
                    std::vector<std::string>{"scripts/kconfig/merge_config.sh", "-m", ".config", config},
                    std::vector<std::string>{"make", "ARCH=x86_64", "olddefconfig"}})
    TRY(run_step(argv, work, log, nullptr));
  // Every line of the fragment must have survived olddefconfig: a dependency left unmet would
  // silently drop an option (9p without INET did).
  auto merged = TRY(read_file(work + "/.config"));
  for (size_t pos = 0; pos < kGuestConfig.size();) {
    size_t nl = kGuestConfig.find('\n', pos);
    std::string_view line = kGuestConfig.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? kGuestConfig.size() : nl + 1;
    if (line.empty() || line[0] == '#') continue;
    // An option turned off is off when it is "not set" or absent (a menu above it is off too).
    bool lost = line.ends_with("=n")
                    ? merged.find(fmt::format("\n{}=", line.substr(0, line.size() - 2))) != std::string::npos
                    : merged.find("\n" + std::string(line) + "\n") == std::string::npos;
    if (lost)
      return fail(Code::ConfigError, fmt::format("the guest kernel configuration lost {}", line),
                  {{"option", std::string(line)}});
  }
  int objects = 0;
  say("compile", fmt::format("make -j{} vmlinux", o.jobs));
  return run_step({"nice", "make", "ARCH=x86_64", fmt::format("-j{}", o.jobs), "vmlinux"}, work, log,
                  [&](std::string_view l) {
                    if (l.starts_with("  CC ") || l.starts_with("  AS ")) {
                      ++objects;
                      say("compile", fmt::format("{} objects: {}", objects, l.substr(2)));
                    }
                  });
}

}  // namespace

Result<std::string> guest_kernel_key(const BuildOptions& o) {
  auto src = sha256_file(o.linux_source);
  if (!src)
    return fail(Code::ConfigError,
                fmt::format("{} is missing: install Debian's linux-source-6.1 (scripts/install-deps)", o.linux_source),
                {{"linux_source", o.linux_source}});
  return sha256_hex(fmt::format("airlock guest kernel 1\n{}\n{}\n", sha256_hex(kGuestConfig), *src));
}

Json GuestImage::to_json() const {
  return {{"kernel", kernel},
          {"kernel_sha256", kernel_sha256},
          {"initramfs", initramfs},
          {"initramfs_sha256", initramfs_sha256},
          {"key", key}};
}

std::string vm_cache_dir() {
  if (const char* d = ::getenv("AIRLOCK_CACHE_DIR"); d && *d) return std::string(d) + "/vm";
  if (const char* x = ::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/airlock/vm";
  const char* home = ::getenv("HOME");
  return std::string(home && *home ? home : "/root") + "/.cache/airlock/vm";
}

std::string_view guest_kernel_config() { return kGuestConfig; }

Result<GuestImage> load_guest_image(const std::string& dir) {
  std::string manifest = dir + "/image.json";
  auto text = read_file(manifest);
  if (!text)
    return fail(Code::ExecutorUnavailable,
                fmt::format("no guest image in {}: run `airlock vm build`", dir), {{"cache_dir", dir}});
  GuestImage img;
  img.dir = dir;
  try {
    Json j = Json::parse(*text);
    img.key = j.at("key").get<std::string>();
    img.kernel_key = j.value("kernel_key", "");
    img.kernel = dir + "/" + j.at("kernel").get<std::string>();
    img.kernel_sha256 = j.at("kernel_sha256").get<std::string>();
    img.initramfs = dir + "/" + j.at("initramfs").get<std::string>();
    img.initramfs_sha256 = j.at("initramfs_sha256").get<std::string>();
  } catch (const Json::exception& e) {
    return fail(Code::ExecutorUnavailable, fmt::format("{} is not a guest image manifest ({}): run `airlock vm build`",
                                                       manifest, e.what()));
  }
  for (auto [path, want] : {std::pair{&img.kernel, &img.kernel_sha256}, {&img.initramfs, &img.initramfs_sha256}}) {
    auto got = sha256_file(*path);
    if (!got || *got != *want)
      return fail(Code::ExecutorUnavailable,
                  fmt::format("the guest image file {} does not match its digest: run `airlock vm build --force`", *path),
                  {{"file", *path}, {"expected_sha256", *want}, {"sha256", got ? *got : std::string("unreadable")}});
  }
  return img;
}

std::string make_initramfs(std::string_view agent) {
  Cpio c;
  for (const char* d : {"dev", "etc", "proc", "run", "sys", "tmp", "usr"}) c.entry(d, 040755, "");
  c.entry("dev/console", 020600, "", 5, 1);
  c.entry("dev/null", 020666, "", 1, 3);
  // Debian's merged /usr: these are links into the shared /usr, as on the host.
  for (const char* l : {"bin", "lib", "lib64", "sbin"}) c.entry(l, 0120777, fmt::format("usr/{}", l));
  c.entry("etc/passwd", 0100644, "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n");
  c.entry("etc/group", 0100644, "root:x:0:\nnogroup:x:65534:\n");
  c.entry("etc/hostname", 0100644, "airlock\n");
  // The workspace reaches the guest over 9p with the host's owners (uid 65534 when an unprivileged
  // user runs airlock) while the command runs as the guest's root: git would refuse it as a
  // repository of another user. The guest holds no other repository, and the workspace's own
  // configuration and hooks are protected paths.
  c.entry("etc/gitconfig", 0100644, "[safe]\n\tdirectory = *\n");
  c.entry("init", 0100755, agent);
  c.entry("TRAILER!!!", 0, "");
  while (c.out.size() % 512) c.out += '\0';
  return c.out;
}

Result<GuestImage> build_guest_image(const BuildOptions& o) {
  auto say = [&](std::string_view stage, std::string_view line) {
    if (o.progress) o.progress(stage, line);
  };
  std::string kkey = TRY(guest_kernel_key(o));
  std::string key = TRY(image_key(kkey, o));
  std::optional<GuestImage> have;
  if (!o.force)
    if (auto h = load_guest_image(o.dir); h) have = *h;
  if (have && have->key == key) {
    say("done", "the cache already holds this image; digests verified");
    return *have;
  }
  TRY(make_dirs(o.dir, 0755));
  std::string work = o.dir + "/build";
  TRY(remove_tree(work));
  TRY(make_dirs(work, 0755));
  std::string log_path = o.dir + "/build.log";
  UniqueFd log(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!log) return fail_errno(Code::IoError, "open " + log_path, errno);
  auto with_log = [&](Error e) {
    e.facts["log"] = log_path;
    e.message += fmt::format(" (log: {})", log_path);
    return std::unexpected(std::move(e));
  };
  if (have && have->kernel_key == kkey) {
    // The kernel is the one this configuration and source build (its digest verified on load):
    // only the agent changed.
    say("compile", "the cache already holds this kernel; digest verified");
    if (::link(have->kernel.c_str(), (work + "/vmlinux").c_str()) < 0)
      return fail_errno(Code::IoError, "link " + have->kernel + " into " + work, errno);
  } else {
    if (auto r = build_kernel(o, work, log.get()); !r) return with_log(r.error());
  }

  say("initramfs", "packing the guest agent");
  auto agent = TRY(read_file(o.agent));
  std::string initramfs = make_initramfs(agent);
  GuestImage img;
  img.dir = o.dir;
  img.key = key;
  img.kernel_key = kkey;
  img.kernel_sha256 = TRY(sha256_file(work + "/vmlinux"));
  img.initramfs_sha256 = sha256_hex(initramfs);
  std::string kernel_name = "vmlinux-" + img.kernel_sha256.substr(0, 16);
  std::string initramfs_name = "initramfs-" + img.initramfs_sha256.substr(0, 16) + ".cpio";
  img.kernel = o.dir + "/" + kernel_name;
  img.initramfs = o.dir + "/" + initramfs_name;
  if (::rename((work + "/vmlinux").c_str(), img.kernel.c_str()) < 0)
    return fail_errno(Code::IoError, "rename vmlinux into " + o.dir, errno);
  TRY(write_file_atomic(img.initramfs, initramfs));
  Json manifest = {{"key", key},
                   {"kernel_key", kkey},
                   {"kernel", kernel_name},
                   {"kernel_sha256", img.kernel_sha256},
                   {"initramfs", initramfs_name},
                   {"initramfs_sha256", img.initramfs_sha256},
                   {"linux_source", o.linux_source}};
  TRY(write_file_atomic(o.dir + "/image.json", manifest.dump(2) + "\n"));
  TRY(remove_tree(work));
  say("done", fmt::format("kernel {} ({}), initramfs {} ({})", kernel_name, img.kernel_sha256, initramfs_name,
                          img.initramfs_sha256));
  return load_guest_image(o.dir);
}

std::string vm_verification_path(const std::string& state_dir) { return state_dir + "/vm-verified.json"; }

Result<void> record_vm_verification(const std::string& state_dir, const GuestImage& image,
                                    const std::string& acceleration, const Json& suite) {
  Json j = {{"kernel_sha256", image.kernel_sha256},
            {"initramfs_sha256", image.initramfs_sha256},
            {"acceleration", acceleration},
            {"uid", ::geteuid()},
            {"verified_at", static_cast<int64_t>(::time(nullptr))},
            {"escape_suite", suite}};
  return write_file_atomic(vm_verification_path(state_dir), j.dump(2) + "\n", 0600);
}

uint64_t probe_tsc_khz() {
  if (auto s = read_file("/sys/devices/system/cpu/cpu0/tsc_freq_khz"); s) {
    uint64_t v = std::strtoull(s->c_str(), nullptr, 10);
    if (v) return v;
  }
  // rdtsc against the monotonic clock over 50 ms: well within the guest clock's tolerance.
  auto t0 = std::chrono::steady_clock::now();
  uint64_t c0 = __rdtsc();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  uint64_t c1 = __rdtsc();
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<uint64_t>(static_cast<double>(c1 - c0) / us * 1000.0 + 0.5);
}

void probe_microvm(plan::HostFacts& f, const std::string& state_dir) {
  f.microvm = {};
  auto why = [&](std::string reason) { f.reasons["microvm"] = std::move(reason); };
  if (::access("/usr/bin/qemu-system-x86_64", X_OK) < 0) {
    why("qemu-system-x86_64 is not installed (Debian's qemu-system-x86; scripts/install-deps)");
    return;
  }
  auto img = load_guest_image(vm_cache_dir());
  if (!img) {
    why(img.error().message);
    return;
  }
  f.microvm.kernel = img->kernel;
  f.microvm.kernel_sha256 = img->kernel_sha256;
  f.microvm.initramfs = img->initramfs;
  f.microvm.initramfs_sha256 = img->initramfs_sha256;
  f.microvm.tsc_khz = probe_tsc_khz();
  auto text = read_file(vm_verification_path(state_dir));
  if (!text) {
    why("the escape suite has not run against a guest on this host: run `airlock vm verify`");
    return;
  }
  try {
    Json j = Json::parse(*text);
    if (j.at("kernel_sha256") != img->kernel_sha256 || j.at("initramfs_sha256") != img->initramfs_sha256) {
      why("the guest image changed since `airlock vm verify` passed: run `airlock vm verify` again");
      return;
    }
    std::string accel = j.at("acceleration").get<std::string>();
    if (accel != "kvm" && accel != "tcg") {
      why(fmt::format("{} names no acceleration: run `airlock vm verify` again", vm_verification_path(state_dir)));
      return;
    }
    f.microvm.acceleration = accel;
    f.microvm.verified = true;
  } catch (const Json::exception& e) {
    why(fmt::format("{} is unreadable ({}): run `airlock vm verify` again", vm_verification_path(state_dir), e.what()));
  }
}

}  // namespace airlock::exec
