// The microVM guest image: a kernel built from Debian's linux-source with vm/guest.config, and an
// initramfs holding our static guest agent; built into the cache directory, verified by digest.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "base/error.h"
#include "base/json_util.h"
#include "plan/host_facts.h"

namespace airlock::exec {

inline constexpr std::string_view kLinuxSource = "/usr/src/linux-source-6.1.tar.xz";
inline constexpr std::string_view kGuestAgentName = "airlock-guest-agent";

struct GuestImage {
  std::string dir;  // <cache>/vm
  std::string kernel, kernel_sha256;        // an uncompressed vmlinux, booted through its PVH entry
  std::string initramfs, initramfs_sha256;  // an uncompressed newc cpio
  std::string key;         // sha256 of what it was built from: the kernel key and the agent
  std::string kernel_key;  // sha256 of what the kernel was built from: config, linux-source
  Json to_json() const;
};

// $AIRLOCK_CACHE_DIR, else $XDG_CACHE_HOME/airlock, else $HOME/.cache/airlock; then "/vm".
std::string vm_cache_dir();
// vm/guest.config as this build carries it (applied over `make tinyconfig`).
std::string_view guest_kernel_config();

// The image the cache holds, each file re-hashed against the manifest. AIRLOCK_EXECUTOR_UNAVAILABLE
// when there is none (saying to run `airlock vm build`) or a digest differs.
Result<GuestImage> load_guest_image(const std::string& dir);

// The initramfs: /init (the agent), mount points, /bin /lib /lib64 /sbin as links into the
// 9p-shared /usr, a minimal /etc. Every entry has mtime 0 and owner 0: the bytes depend only on
// the agent's.
std::string make_initramfs(std::string_view agent);

struct BuildOptions {
  std::string dir;          // <cache>/vm
  std::string agent;        // the static guest agent executable
  std::string linux_source = std::string(kLinuxSource);
  int jobs = 2;
  bool force = false;       // rebuild even when the cache holds this key
  // Called with a stage ("extract", "configure", "compile", "initramfs", "done") and a line.
  std::function<void(std::string_view stage, std::string_view line)> progress;
};

// What the kernel is built from: the configuration and linux-source. The agent is not part of it:
// a changed agent repacks the initramfs alone (with the cached kernel, its digest verified).
Result<std::string> guest_kernel_key(const BuildOptions& o);

// Builds (or reuses, when the manifest's key matches and the digests verify) the image.
// AIRLOCK_CONFIG_ERROR for a missing linux-source or agent; a failed build step names the step
// and keeps its log in <dir>/build.log.
Result<GuestImage> build_guest_image(const BuildOptions& o);

// Where `airlock vm verify` records a passing escape suite: <state_dir>/vm-verified.json.
std::string vm_verification_path(const std::string& state_dir);
// Records that the escape suite passed against a guest booted from `image` with `acceleration`.
Result<void> record_vm_verification(const std::string& state_dir, const GuestImage& image,
                                    const std::string& acceleration, const Json& suite);

// The host's TSC frequency in kHz (sysfs when the kernel exports it, else measured): a TCG guest
// is told it (tsc_early_khz) instead of calibrating its clock, which under emulation can hang.
uint64_t probe_tsc_khz();

// Fills facts.microvm: the cached image (digests verified), and whether `airlock vm verify` passed
// on this host with this very image, with what acceleration. Why not: facts.reasons["microvm"].
void probe_microvm(plan::HostFacts& facts, const std::string& state_dir);

}  // namespace airlock::exec
