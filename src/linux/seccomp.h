// seccomp: compile the plan's filter to BPF in the parent (libseccomp), install it in the child.
#pragma once

#include <linux/filter.h>

#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json_util.h"
#include "plan/plan.h"

namespace airlock::linux {

// A self-only call as applied: it works on the caller itself and fails with EPERM for anyone else.
struct SelfOnlyApplied {
  std::string syscall;
  // "": its argument 0 is the pid, and only 0 passes; else the name of the only kind of target
  // that passes, with who 0 (PRIO_PROCESS, IOPRIO_WHO_PROCESS).
  std::string self_kind;
};

// What socket(2) may make under the filter.
enum class SocketsApplied { AnyFamily, UnixOnly, None };

// What the filter denies, for the receipt (exec::Enforced). Unlisted calls are allowed; a call of
// a foreign architecture kills the process.
struct SeccompApplied {
  std::vector<std::string> denied_syscalls;  // EPERM
  std::vector<SelfOnlyApplied> self_only;
  bool namespace_clone_denied = false;  // clone3 ENOSYS, clone with a CLONE_NEW* flag EPERM
  SocketsApplied sockets = SocketsApplied::AnyFamily;  // None: socketpair(2) still works
  std::vector<std::string> denied_ioctls;    // EPERM
  size_t instructions = 0;                   // of the BPF program
};

struct PreparedSeccomp {
  std::vector<sock_filter> program;
  sock_fprog fprog{};  // points into program; valid while this object lives and is not moved
  SeccompApplied applied;
};

// Parent side. A name the plan lists that this build cannot compile (an unknown syscall or ioctl,
// a self-only call without a rule) is AIRLOCK_INTERNAL_ERROR, never skipped silently.
Result<std::unique_ptr<PreparedSeccomp>> prepare_seccomp(const plan::SeccompPlan& plan);

// The same filter as an OCI runtime profile (the JSON `podman run --security-opt seccomp=FILE`
// reads), for the container tier, whose engine installs it: the same rules from the same plan.
struct OciSeccomp {
  Json profile;
  SeccompApplied applied;  // instructions: 0 (the engine compiles it)
};
Result<OciSeccomp> oci_seccomp_profile(const plan::SeccompPlan& plan);

// Child side, after no_new_privs and Landlock: returns 0 or an errno. Allocation-free.
int apply_seccomp(const sock_fprog* prog) noexcept;

}  // namespace airlock::linux
