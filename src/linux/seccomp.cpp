// seccomp: build the deny-list filter with libseccomp and export it as a BPF program.
#include "linux/seccomp.h"

#include <linux/seccomp.h>
#include <seccomp.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "base/unique_fd.h"

namespace airlock::linux {
namespace {

struct CtxDeleter {
  void operator()(scmp_filter_ctx c) const { seccomp_release(c); }
};
using Ctx = std::unique_ptr<void, CtxDeleter>;

Result<int> syscall_number(const std::string& name) {
  int nr = seccomp_syscall_resolve_name(name.c_str());
  if (nr == __NR_SCMP_ERROR)
    return fail(Code::InternalError, "seccomp: unknown syscall name " + name, {{"syscall", name}});
  return nr;
}

std::unexpected<Error> rule_failed(const std::string& what, int rc) {
  return fail_errno(Code::ExecutorUnavailable, "seccomp rule for " + what, -rc);
}

// CLONE_NEWTIME is absent on purpose: clone(2) does not take it (its bit is part of the exit
// signal byte there); time namespaces come only from clone3 (ENOSYS here) and unshare (denied).
constexpr uint64_t kNamespaceFlags = CLONE_NEWNS | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |
                                     CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP;

// How a self-only call names its target. Either the pid is argument 0 and 0 means the caller, or
// argument 0 says what kind of target argument 1 is, and only (`self_kind`, 0) means the caller.
// Every other value fails with EPERM: PRIO_PGRP and PRIO_USER (every process of a uid), a pid, a
// thread id. The comparisons are on all 64 bits, so junk in the high half of an int argument
// (which the kernel ignores) can only make a call fail, never pass.
struct SelfOnly {
  const char* name;
  int kind_arg;  // -1: argument 0 is the pid itself
  uint64_t self_kind;
  const char* self_kind_name;
};
constexpr int kIoprioWhoProcess = 1;  // IOPRIO_WHO_PROCESS (linux/ioprio.h is not in every libc's headers)
constexpr SelfOnly kSelfOnly[] = {
    {"setpriority", 0, PRIO_PROCESS, "PRIO_PROCESS"},
    {"getpriority", 0, PRIO_PROCESS, "PRIO_PROCESS"},
    {"ioprio_set", 0, kIoprioWhoProcess, "IOPRIO_WHO_PROCESS"},
    {"ioprio_get", 0, kIoprioWhoProcess, "IOPRIO_WHO_PROCESS"},
    {"prlimit64", -1, 0, ""},
    {"sched_setaffinity", -1, 0, ""},
    {"sched_getaffinity", -1, 0, ""},
    {"sched_setscheduler", -1, 0, ""},
    {"sched_setparam", -1, 0, ""},
    {"sched_setattr", -1, 0, ""},
    {"sched_getparam", -1, 0, ""},
    {"sched_getscheduler", -1, 0, ""},
    {"sched_getattr", -1, 0, ""},
    {"migrate_pages", -1, 0, ""},
    {"move_pages", -1, 0, ""},
    {"get_robust_list", -1, 0, ""},
};

}  // namespace

Result<std::unique_ptr<PreparedSeccomp>> prepare_seccomp(const plan::SeccompPlan& plan) {
  Ctx ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return fail(Code::ExecutorUnavailable, "seccomp_init failed");
  // Syscalls of a foreign architecture (i386 via int 0x80, x32) kill the process: the
  // default bad-arch action, kept on purpose, since the deny-list names native numbers only.
  SeccompApplied applied;
  for (const auto& name : plan.denied_syscalls) {
    int nr = TRY(syscall_number(name));
    if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), nr, 0); rc < 0) return rule_failed(name, rc);
    applied.denied_syscalls.push_back(name);
  }
  for (const auto& name : plan.self_only_syscalls) {
    const SelfOnly* rule = nullptr;
    for (const auto& r : kSelfOnly)
      if (name == r.name) rule = &r;
    if (!rule) return fail(Code::InternalError, "seccomp: no self-only rule for syscall " + name, {{"syscall", name}});
    int nr = TRY(syscall_number(name));
    // Rules on one syscall are OR'ed: any argument that names someone else denies the call.
    if (rule->kind_arg < 0) {
      if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), nr, 1, SCMP_A0(SCMP_CMP_NE, 0)); rc < 0)
        return rule_failed(name, rc);
      applied.self_only.push_back({name, ""});
    } else {
      if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), nr, 1, SCMP_A0(SCMP_CMP_NE, rule->self_kind));
          rc < 0)
        return rule_failed(name, rc);
      if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), nr, 1, SCMP_A1(SCMP_CMP_NE, 0)); rc < 0)
        return rule_failed(name, rc);
      applied.self_only.push_back({name, rule->self_kind_name});
    }
  }
  if (plan.deny_namespace_clone) {
    // clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc fall back
    // to clone(2), whose flags the filter can check.
    if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0); rc < 0)
      return rule_failed("clone3", rc);
    // One rule per namespace flag: rules on one syscall are OR'ed, so any flag set is denied.
    for (uint64_t bit = 1; bit != 0; bit <<= 1) {
      if (!(kNamespaceFlags & bit)) continue;
      if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                    SCMP_A0(SCMP_CMP_MASKED_EQ, bit, bit));
          rc < 0)
        return rule_failed("clone", rc);
    }
    applied.namespace_clone_denied = true;
  }
  if (plan.no_sockets) {
    if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 0); rc < 0)
      return rule_failed("socket", rc);
    applied.sockets = SocketsApplied::None;
  } else if (plan.only_unix_sockets) {
    if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                                  SCMP_A0(SCMP_CMP_NE, AF_UNIX));
        rc < 0)
      return rule_failed("socket", rc);
    applied.sockets = SocketsApplied::UnixOnly;
  }
  for (const auto& name : plan.denied_ioctls) {
    uint64_t req = name == "TIOCSTI" ? TIOCSTI : name == "TIOCLINUX" ? TIOCLINUX : 0;
    if (req == 0) return fail(Code::InternalError, "seccomp: unknown ioctl name " + name, {{"ioctl", name}});
    // Compare the low 32 bits only: the kernel truncates the request to unsigned int, so a
    // request with high bits set must not slip past.
    if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                                  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffULL, req));
        rc < 0)
      return rule_failed("ioctl " + name, rc);
    applied.denied_ioctls.push_back(name);
  }

  UniqueFd mem(::memfd_create("airlock-seccomp", MFD_CLOEXEC));
  if (!mem) return fail_errno(Code::ExecutorUnavailable, "memfd_create", errno);
  if (int rc = seccomp_export_bpf(ctx.get(), mem.get()); rc < 0)
    return fail_errno(Code::ExecutorUnavailable, "seccomp_export_bpf", -rc);
  off_t size = ::lseek(mem.get(), 0, SEEK_END);
  if (size <= 0 || size % static_cast<off_t>(sizeof(sock_filter)) != 0)
    return fail(Code::ExecutorUnavailable, "seccomp_export_bpf produced no program");
  // The kernel takes at most BPF_MAXINSNS instructions; say so here, not as an errno in the child.
  if (static_cast<size_t>(size) / sizeof(sock_filter) > BPF_MAXINSNS)
    return fail(Code::InternalError, fmt::format("the seccomp program has {} instructions, above the kernel's {}",
                                                 static_cast<size_t>(size) / sizeof(sock_filter), BPF_MAXINSNS));
  auto out = std::make_unique<PreparedSeccomp>();
  out->program.resize(static_cast<size_t>(size) / sizeof(sock_filter));
  if (::pread(mem.get(), out->program.data(), static_cast<size_t>(size), 0) != size)
    return fail_errno(Code::ExecutorUnavailable, "reading the exported filter", errno);
  out->fprog.len = static_cast<unsigned short>(out->program.size());
  out->fprog.filter = out->program.data();
  applied.instructions = out->program.size();
  out->applied = std::move(applied);
  return out;
}

int apply_seccomp(const sock_fprog* prog) noexcept {
  // TSYNC is not needed: the child is single-threaded between clone and exec.
  if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, prog) < 0) return errno;
  return 0;
}

}  // namespace airlock::linux
