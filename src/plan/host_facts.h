// HostFacts: what the probe measured about this host, as a plain value the planner reads.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json_util.h"

namespace airlock::plan {

// Landlock ABI versions this build knows the rights of (6.15+ kernels report 7).
inline constexpr int kLandlockAbiKnown = 7;

// The microVM tier's facts: the guest image in the cache and what `airlock vm verify` recorded
// for it on this host (exec::probe_microvm). Acceleration is measured by booting a guest.
struct VmFacts {
  std::string kernel, kernel_sha256;        // "" when the cache holds no verified image
  std::string initramfs, initramfs_sha256;
  std::string acceleration;  // "kvm" | "tcg": what booted the guest when verify ran
  bool verified = false;     // the escape suite passed against a real guest with this image here
  uint64_t tsc_khz = 0;      // the host's TSC frequency: a TCG guest skips calibrating its clock
};

// The container tier's facts (exec::probe_container, their only writer): the OCI engine that ran
// a one-shot container here, and each pinned image it ran one in, with what that run measured.
struct ContainerImageFact {
  std::string reference;  // NAME@sha256:<manifest digest>, as a policy's `image` names it
  std::string image_id;   // sha256:<config digest>: the engine's content id, what is run
  bool ok = false;        // the check ran in it and measured the tier's confinement
  std::string reason;     // what was measured, or why it is not ok
  int64_t checked_at = 0;  // unix seconds
  bool operator==(const ContainerImageFact&) const = default;
};
struct ContainerFacts {
  std::string engine;   // the engine's path ("/usr/bin/podman"), "" when none ran a container here
  std::string version;  // as the engine reports it
  std::string runtime;  // the OCI runtime that ran the check: "crun" or "runc"
  bool rootless = false;
  std::vector<ContainerImageFact> images;
  bool operator==(const ContainerFacts&) const = default;
};

struct HostFacts {
  std::string kernel_release;
  bool running_as_root = false;      // effective uid 0
  int landlock_abi = 0;              // 0: Landlock absent or disabled
  bool seccomp_filter = false;       // SECCOMP_MODE_FILTER usable
  bool no_new_privs = false;
  bool user_namespaces = false;      // a user namespace can be created by this caller
  bool overlayfs_in_userns = false;  // overlayfs mountable inside such a namespace
  std::vector<std::string> cgroup_v2_controllers;  // delegated to a subtree we may write
  std::vector<std::string> cgroup_v1_writable;     // v1 controllers whose hierarchy we may write
  // Where the v1 sandbox cgroups go: "" for below our own cgroup, else the delegated directory
  // `airlock setup delegate` made for us, "<controller>" standing for each controller's name.
  std::string cgroup_v1_base;
  // When no cgroup we may write has memory, pids and cpu: the command that fixes it for this
  // host and this user ("sudo airlock setup delegate NAME" on v1, a systemd delegation on v2).
  std::string cgroup_fix;
  bool kvm_usable = false;           // /dev/kvm opens and KVM_CREATE_VM succeeds
  VmFacts microvm;                   // reasons["microvm"] says why it is not verified
  ContainerFacts container;          // reasons["container"] says why no engine ran one
  // Credential and configuration files of the agent profiles that exist here (absolute; a
  // symlink's target too): the plan hides every one beneath what the sandbox may read.
  std::vector<std::string> credential_files;
  // Why a fact is false, keyed by fact name ("landlock_abi", "user_namespaces", ...).
  std::map<std::string, std::string> reasons;

  bool has_cgroup_controller(std::string_view name) const;
};

// Which of the costlier facts a probe should measure (see linux::probe_host(FactNeeds)).
struct FactNeeds {
  bool user_namespaces = false;
  bool overlayfs = false;
  bool cgroups = false;
  bool kvm = false;
  bool container = false;  // the engine and the pinned images (never kept in the per-boot cache)
  static FactNeeds all() { return {true, true, true, true, true}; }
};

Json to_json(const HostFacts& f);
// Strict: used by golden tests and by `--facts FILE` to plan for another host. A document it cannot
// read is AIRLOCK_OPTION_INVALID (the operator's argument), with the JSON path in facts.path.
Result<HostFacts> host_facts_from_json(const Json& j);

// A host with no confinement features at all, and one with every feature.
HostFacts facts_nothing();
HostFacts facts_everything();

}  // namespace airlock::plan
