// Enforced: what an executor enforces, measured when it was prepared, as a value. session.open
// records it (to_json, the one serialiser, schema airlock.enforced.v1); everything else reads its
// fields, never the JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/enum_names.h"
#include "base/json_util.h"
#include "linux/landlock.h"
#include "linux/mounts.h"
#include "linux/rlimits.h"
#include "linux/seccomp.h"
#include "plan/plan.h"
#include "policy/task_policy.h"

namespace airlock::exec {

// The schema of the record to_json writes. A change to a key's name or meaning is a new version.
inline constexpr std::string_view kEnforcedSchema = "airlock.enforced.v1";

// Where the command's network goes: the host's own (the host tier: no isolation); none (a sandbox
// with no network: loopback only, or no socket outside AF_UNIX); only the plan's network door; or
// no network device at all (the microvm tier's guest).
#define AIRLOCK_NETWORKS_ENFORCED(X) \
  X(Host, "host") X(None, "none") X(Door, "door") X(NoGuestDevice, "none (no network device in the guest)")
AIRLOCK_ENUM(NetworkEnforced, AIRLOCK_NETWORKS_ENFORCED)

// The namespaces tier's new namespaces and root (QEMU's, on the microvm tier).
struct NamespacesEnforced {
  std::vector<std::string> created;  // the namespaces the command's init is cloned into
  std::string uid_map;               // as written for the init
  linux::MountsApplied mounts;
  std::string hostname;
};

// The microvm tier's guest; the rest of the record is QEMU's own confinement.
struct MicrovmEnforced {
  std::string acceleration;  // "kvm" | "tcg"
  uint64_t memory_mb = 0;
  int vcpus = 1;
  std::string kernel_sha256, initramfs_sha256;  // checked against the bytes staged at every boot
  size_t pool = 0;                              // guests booted ahead
  uint64_t guest_pids_max = 0;                  // pids.max of the command's cgroup in the guest
};

// The container tier's engine and image; the rest of the record is what the engine was told to
// apply (and the probe's check measured it applies, exec::probe_container).
struct ContainerEnforced {
  std::string engine, runtime;
  bool rootless = false;
  std::string image, image_id;
  std::string workdir;
};

struct Enforced {
  policy::ExecutorKind executor = policy::ExecutorKind::Host;
  int tier = 0;
  std::optional<linux::LandlockApplied> landlock;
  std::optional<linux::SeccompApplied> seccomp;
  std::optional<NamespacesEnforced> namespaces;
  std::optional<plan::CgroupPlan> cgroup;  // the sandbox's own, set per run (swap at zero)
  std::vector<linux::RlimitApplied> rlimits;
  bool no_new_privs = false;
  bool capabilities_dropped = false;  // every set emptied, the bounding set too
  plan::ProcessLimitMechanism process_limit = plan::ProcessLimitMechanism::RlimitNproc;
  uint64_t wall_timeout_ms = 0;  // 0: none
  NetworkEnforced network = NetworkEnforced::None;
  std::optional<plan::DoorPlan> door;  // with network Door
  std::optional<MicrovmEnforced> microvm;
  std::optional<ContainerEnforced> container;
};

// The record session.open carries as "enforced": {"schema": kEnforcedSchema, ...}. The only place
// an Enforced becomes JSON.
Json to_json(const Enforced& e);

}  // namespace airlock::exec
