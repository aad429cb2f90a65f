// Landlock: the ABI rights table, ruleset preparation and the child's restrict_self.
#include "linux/landlock.h"

#include <fcntl.h>
#include <linux/landlock.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace airlock::linux {
namespace {

// Bookworm's header stops at ABI 2; the rest of the ABI up to 7 is defined here.
#ifndef SYS_landlock_create_ruleset
constexpr long kSysCreateRuleset = 444;
constexpr long kSysAddRule = 445;
constexpr long kSysRestrictSelf = 446;
#else
constexpr long kSysCreateRuleset = SYS_landlock_create_ruleset;
constexpr long kSysAddRule = SYS_landlock_add_rule;
constexpr long kSysRestrictSelf = SYS_landlock_restrict_self;
#endif

constexpr uint64_t kExecute = 1ULL << 0;
constexpr uint64_t kWriteFile = 1ULL << 1;
constexpr uint64_t kReadFile = 1ULL << 2;
constexpr uint64_t kReadDir = 1ULL << 3;
constexpr uint64_t kRemoveDir = 1ULL << 4;
constexpr uint64_t kRemoveFile = 1ULL << 5;
constexpr uint64_t kMakeChar = 1ULL << 6;
constexpr uint64_t kMakeDir = 1ULL << 7;
constexpr uint64_t kMakeReg = 1ULL << 8;
constexpr uint64_t kMakeSock = 1ULL << 9;
constexpr uint64_t kMakeFifo = 1ULL << 10;
constexpr uint64_t kMakeBlock = 1ULL << 11;
constexpr uint64_t kMakeSym = 1ULL << 12;
constexpr uint64_t kRefer = 1ULL << 13;     // ABI 2
constexpr uint64_t kTruncate = 1ULL << 14;  // ABI 3
constexpr uint64_t kIoctlDev = 1ULL << 15;  // ABI 5

constexpr uint64_t kNetBindTcp = 1ULL << 0;     // ABI 4
constexpr uint64_t kNetConnectTcp = 1ULL << 1;  // ABI 4
constexpr uint64_t kScopeAbstractUnix = 1ULL << 0;  // ABI 6
constexpr uint64_t kScopeSignal = 1ULL << 1;        // ABI 6

// struct landlock_ruleset_attr as of ABI 6; the kernel accepts a prefix of it by size.
struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};
struct PathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
} __attribute__((packed));
struct NetPortAttr {
  uint64_t allowed_access;
  uint64_t port;
} __attribute__((packed));
constexpr int kRuleNetPort = 2;  // LANDLOCK_RULE_NET_PORT (ABI 4)

uint64_t fs_rights_for_abi(int abi) {
  uint64_t r = kExecute | kWriteFile | kReadFile | kReadDir | kRemoveDir | kRemoveFile | kMakeChar |
               kMakeDir | kMakeReg | kMakeSock | kMakeFifo | kMakeBlock | kMakeSym;
  if (abi >= 2) r |= kRefer;
  if (abi >= 3) r |= kTruncate;
  if (abi >= 5) r |= kIoctlDev;
  return r;
}

uint64_t rights_of(plan::Access a, bool is_dir) {
  constexpr uint64_t kFileOnly = kExecute | kWriteFile | kReadFile | kTruncate | kIoctlDev;
  uint64_t r = 0;
  switch (a) {
    case plan::Access::Read: r = kReadFile | kReadDir; break;
    case plan::Access::Exec: r = kReadFile | kReadDir | kExecute; break;
    case plan::Access::Write:
      r = kReadFile | kReadDir | kExecute | kWriteFile | kTruncate | kRemoveDir | kRemoveFile |
          kMakeDir | kMakeReg | kMakeSym | kMakeFifo | kMakeSock | kRefer;
      break;
    case plan::Access::DevWrite: r = kReadFile | kWriteFile | kTruncate | kIoctlDev; break;
  }
  // A rule on a file may only carry rights that apply to files.
  return is_dir ? r : (r & kFileOnly);
}

std::vector<std::string> rights_names(uint64_t r) {
  static constexpr std::pair<uint64_t, const char*> kNames[] = {
      {kExecute, "execute"},      {kWriteFile, "write_file"},   {kReadFile, "read_file"},
      {kReadDir, "read_dir"},     {kRemoveDir, "remove_dir"},   {kRemoveFile, "remove_file"},
      {kMakeChar, "make_char"},   {kMakeDir, "make_dir"},       {kMakeReg, "make_reg"},
      {kMakeSock, "make_sock"},   {kMakeFifo, "make_fifo"},     {kMakeBlock, "make_block"},
      {kMakeSym, "make_sym"},     {kRefer, "refer"},            {kTruncate, "truncate"},
      {kIoctlDev, "ioctl_dev"}};
  std::vector<std::string> out;
  for (auto [bit, name] : kNames)
    if (r & bit) out.push_back(name);
  return out;
}

}  // namespace

int probe_landlock_abi() {
  long v = ::syscall(kSysCreateRuleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return v < 0 ? 0 : static_cast<int>(v);
}

Result<PreparedLandlock> prepare_landlock(const plan::LandlockPlan& lp, const LandlockAnchors& anchors) {
  int abi = probe_landlock_abi();
  if (abi < lp.abi_floor)
    return fail(Code::ConfinementBelowFloor,
                fmt::format("the live kernel reports Landlock ABI {}, below the floor of ABI {}", abi,
                            lp.abi_floor),
                {{"landlock_abi", abi}, {"floor", lp.abi_floor}});

  RulesetAttr attr{};
  attr.handled_access_fs = fs_rights_for_abi(abi);
  size_t attr_size = sizeof(uint64_t);
  if (abi >= 4 && lp.restrict_tcp) {
    attr.handled_access_net = kNetBindTcp | kNetConnectTcp;  // only tcp_connect_ports are granted
    attr_size = 2 * sizeof(uint64_t);
  }
  if (abi >= 6 && (lp.scope_abstract_unix || lp.scope_signal)) {
    attr.scoped = (lp.scope_abstract_unix ? kScopeAbstractUnix : 0) | (lp.scope_signal ? kScopeSignal : 0);
    attr_size = sizeof(RulesetAttr);
  }
  int fd = static_cast<int>(::syscall(kSysCreateRuleset, &attr, attr_size, 0));
  if (fd < 0) return fail_errno(Code::ExecutorUnavailable, "landlock_create_ruleset", errno);
  PreparedLandlock out;
  out.ruleset = UniqueFd(fd);
  LandlockApplied& applied = out.applied;
  applied.abi = abi;
  applied.handled_fs = rights_names(attr.handled_access_fs);
  applied.tcp_bind_connect_denied = attr.handled_access_net != 0;
  applied.scoped_abstract_unix = (attr.scoped & kScopeAbstractUnix) != 0;
  applied.scoped_signal = (attr.scoped & kScopeSignal) != 0;

  for (const auto& rule : lp.fs_rules) {
    std::string path;
    switch (rule.anchor) {
      case plan::Anchor::Host: path = rule.path; break;
      case plan::Anchor::View: path = rule.path == "." ? anchors.view : anchors.view + "/" + rule.path; break;
      case plan::Anchor::Scratch: path = rule.path == "." ? anchors.scratch : anchors.scratch + "/" + rule.path; break;
    }
    UniqueFd pfd(::open(path.c_str(), O_PATH | O_CLOEXEC));
    if (!pfd) {
      if (rule.optional && errno == ENOENT) continue;
      return fail_errno(Code::ExecutorUnavailable, "cannot open Landlock rule path " + path, errno);
    }
    struct stat st{};
    if (::fstat(pfd.get(), &st) < 0) return fail_errno(Code::ExecutorUnavailable, "fstat " + path, errno);
    PathBeneathAttr pb{};
    pb.allowed_access = rights_of(rule.access, S_ISDIR(st.st_mode)) & attr.handled_access_fs;
    pb.parent_fd = pfd.get();
    if (::syscall(kSysAddRule, out.ruleset.get(), LANDLOCK_RULE_PATH_BENEATH, &pb, 0) < 0)
      return fail_errno(Code::ExecutorUnavailable, "landlock_add_rule " + path, errno);
    applied.rules.push_back({path, rule.access, rights_names(pb.allowed_access)});
  }
  if (attr.handled_access_net != 0)
    for (int port : lp.tcp_connect_ports) {
      NetPortAttr np{kNetConnectTcp, static_cast<uint64_t>(port)};
      if (::syscall(kSysAddRule, out.ruleset.get(), kRuleNetPort, &np, 0) < 0)
        return fail_errno(Code::ExecutorUnavailable, fmt::format("landlock_add_rule tcp port {}", port), errno);
      applied.tcp_connect_ports.push_back(port);
    }
  return out;
}

int apply_landlock_read_rule(int ruleset_fd, const char* path, bool directories_only) noexcept {
  int fd = ::open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) return errno;
  PathBeneathAttr pb{};
  pb.allowed_access = directories_only ? kReadDir : (kReadFile | kReadDir);
  pb.parent_fd = fd;
  int rc = ::syscall(kSysAddRule, ruleset_fd, LANDLOCK_RULE_PATH_BENEATH, &pb, 0) < 0 ? errno : 0;
  ::close(fd);
  return rc;
}

int apply_landlock(int ruleset_fd) noexcept {
  if (::syscall(kSysRestrictSelf, ruleset_fd, 0) < 0) return errno;
  return 0;
}

}  // namespace airlock::linux
