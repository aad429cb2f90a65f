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
#include <optional>
#include <vector>

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

// One rule of the filter: `syscall` fails with `err` when its argument (if any) compares true.
// Rules on one syscall are OR'ed. The one list both renderings read: the BPF program airlock
// installs itself, and the OCI profile a container engine installs.
struct Rule {
  std::string syscall;
  int err = EPERM;
  struct Arg {
    unsigned index;
    scmp_compare op;  // SCMP_CMP_NE or SCMP_CMP_MASKED_EQ
    uint64_t value, value_two;
  };
  std::optional<Arg> arg;
};

Result<std::vector<Rule>> rules_of(const plan::SeccompPlan& plan, SeccompApplied& applied) {
  std::vector<Rule> rules;
  for (const auto& name : plan.denied_syscalls) {
    TRY(syscall_number(name));
    rules.push_back({name, EPERM, std::nullopt});
    applied.denied_syscalls.push_back(name);
  }
  for (const auto& name : plan.self_only_syscalls) {
    const SelfOnly* rule = nullptr;
    for (const auto& r : kSelfOnly)
      if (name == r.name) rule = &r;
    if (!rule) return fail(Code::InternalError, "seccomp: no self-only rule for syscall " + name, {{"syscall", name}});
    TRY(syscall_number(name));
    // Rules on one syscall are OR'ed: any argument that names someone else denies the call.
    if (rule->kind_arg < 0) {
      rules.push_back({name, EPERM, Rule::Arg{0, SCMP_CMP_NE, 0, 0}});
      applied.self_only.push_back({name, ""});
    } else {
      rules.push_back({name, EPERM, Rule::Arg{0, SCMP_CMP_NE, rule->self_kind, 0}});
      rules.push_back({name, EPERM, Rule::Arg{1, SCMP_CMP_NE, 0, 0}});
      applied.self_only.push_back({name, rule->self_kind_name});
    }
  }
  if (plan.deny_namespace_clone) {
    // clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc fall back
    // to clone(2), whose flags the filter can check.
    rules.push_back({"clone3", ENOSYS, std::nullopt});
    // One rule per namespace flag: rules on one syscall are OR'ed, so any flag set is denied.
    for (uint64_t bit = 1; bit != 0; bit <<= 1)
      if (kNamespaceFlags & bit) rules.push_back({"clone", EPERM, Rule::Arg{0, SCMP_CMP_MASKED_EQ, bit, bit}});
    applied.namespace_clone_denied = true;
  }
  if (plan.no_sockets) {
    rules.push_back({"socket", EACCES, std::nullopt});
    applied.sockets = SocketsApplied::None;
  } else if (plan.only_unix_sockets) {
    rules.push_back({"socket", EAFNOSUPPORT, Rule::Arg{0, SCMP_CMP_NE, AF_UNIX, 0}});
    applied.sockets = SocketsApplied::UnixOnly;
  }
  for (const auto& name : plan.denied_ioctls) {
    uint64_t req = name == "TIOCSTI" ? TIOCSTI : name == "TIOCLINUX" ? TIOCLINUX : 0;
    if (req == 0) return fail(Code::InternalError, "seccomp: unknown ioctl name " + name, {{"ioctl", name}});
    // Compare the low 32 bits only: the kernel truncates the request to unsigned int, so a
    // request with high bits set must not slip past.
    rules.push_back({"ioctl", EPERM, Rule::Arg{1, SCMP_CMP_MASKED_EQ, 0xffffffffULL, req}});
    applied.denied_ioctls.push_back(name);
  }
  return rules;
}

}  // namespace

Result<std::unique_ptr<PreparedSeccomp>> prepare_seccomp(const plan::SeccompPlan& plan) {
  Ctx ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return fail(Code::ExecutorUnavailable, "seccomp_init failed");
  // Syscalls of a foreign architecture (i386 via int 0x80, x32) kill the process: the
  // default bad-arch action, kept on purpose, since the deny-list names native numbers only.
  SeccompApplied applied;
  for (const Rule& r : TRY(rules_of(plan, applied))) {
    int nr = TRY(syscall_number(r.syscall));
    int rc = r.arg ? seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(r.err), nr, 1,
                                      scmp_arg_cmp{r.arg->index, r.arg->op, r.arg->value, r.arg->value_two})
                   : seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(r.err), nr, 0);
    if (rc < 0) return rule_failed(r.syscall, rc);
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

Result<OciSeccomp> oci_seccomp_profile(const plan::SeccompPlan& plan) {
  OciSeccomp out;
  Json syscalls = Json::array();
  for (const Rule& r : TRY(rules_of(plan, out.applied))) {
    Json entry = {{"names", Json::array({r.syscall})}, {"action", "SCMP_ACT_ERRNO"}, {"errnoRet", r.err}};
    if (r.arg) {
      Json a = {{"index", r.arg->index},
                {"value", r.arg->value},
                {"op", r.arg->op == SCMP_CMP_NE ? "SCMP_CMP_NE" : "SCMP_CMP_MASKED_EQ"}};
      if (r.arg->op == SCMP_CMP_MASKED_EQ) a["valueTwo"] = r.arg->value_two;
      entry["args"] = Json::array({std::move(a)});
    }
    syscalls.push_back(std::move(entry));
  }
  // The native architecture only, as the rules name native numbers. What the runtime does with a
  // call of another (int 0x80) is its own bad-arch action, not measured yet (docs/tiers.md).
  out.profile = {{"defaultAction", "SCMP_ACT_ALLOW"},
                 {"defaultErrnoRet", EPERM},
                 {"architectures", Json::array({"SCMP_ARCH_X86_64"})},
                 {"syscalls", std::move(syscalls)}};
  return out;
}

int apply_seccomp(const sock_fprog* prog) noexcept {
  // TSYNC is not needed: the child is single-threaded between clone and exec.
  if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, prog) < 0) return errno;
  return 0;
}

}  // namespace airlock::linux
