// CLI plumbing: state directory, profile, refusal printing, policy loading.
#include "cli/common.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <sys/stat.h>
#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/custody.h"
#include "base/encoding.h"
#include "base/fs.h"
#include "base/hash.h"
#include "base/unique_fd.h"
#include "exec/planner.h"

namespace airlock::cli {

Result<plan::Profile> parse_profile(const std::string& s) {
  if (s == "production") return plan::Profile::Production;
  if (s == "development") return plan::Profile::Development;
  return fail(Code::OptionInvalid, fmt::format("unknown profile \"{}\" (production or development)", s),
              {{"profile", s}});
}

Result<std::string> resolve_state_dir(const std::string& flag) {
  std::string dir = flag;
  if (dir.empty())
    if (const char* e = std::getenv("AIRLOCK_STATE_DIR"); e && *e) dir = e;
  if (dir.empty()) {
    if (::geteuid() == 0) {
      dir = "/var/lib/airlock";
    } else if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x) {
      dir = std::string(x) + "/airlock";
    } else if (const char* h = std::getenv("HOME"); h && *h) {
      dir = std::string(h) + "/.local/state/airlock";
    } else {
      return fail(Code::ConfigError, "no state directory: pass --state-dir or set AIRLOCK_STATE_DIR");
    }
  }
  dir = absolute_path(dir);
  TRY(make_dirs(dir));
  struct stat st{};
  if (::stat(dir.c_str(), &st) < 0 || !S_ISDIR(st.st_mode))
    return fail(Code::ConfigError, fmt::format("state directory {} is not a directory", dir));
  if (st.st_uid == ::geteuid() && (st.st_mode & 077)) ::chmod(dir.c_str(), 0700);
  TRY(check_directory_custody(dir, ::geteuid()));
  return dir;
}

int refuse(const Error& e, bool json) {
  std::fprintf(stderr, "airlock: refused: %s: %s\n", std::string(to_name(e.code)).c_str(),
               escape_for_terminal(e.message).c_str());
  // Facts may quote bytes from a sandbox (a file name): shown lossy, never thrown.
  constexpr auto kReplace = nlohmann::json::error_handler_t::replace;
  // One line, so a reader of --json output takes each line as one JSON value.
  if (json) std::printf("%s\n", nlohmann::json({{"refused", e.to_json()}}).dump(-1, ' ', false, kReplace).c_str());
  else if (!e.facts.empty())
    std::fprintf(stderr, "  facts: %s\n", e.facts.dump(-1, ' ', false, kReplace).c_str());
  return kRefusedExit;
}

namespace {

bool exists(const std::string& path) {
  struct stat st{};
  return ::lstat(path.c_str(), &st) == 0;
}

std::optional<std::string> user_policy() {
  std::string dir;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x == '/') dir = x;
  else if (const char* h = std::getenv("HOME"); h && *h == '/') dir = std::string(h) + "/.config";
  else return std::nullopt;
  std::string file = dir + "/airlock/policy.json";
  return exists(file) ? std::optional(file) : std::nullopt;
}

// STATE/allowed-policies/<sha256 of the real path, a newline and the text's sha256>.
std::string allow_record(const std::string& state_dir, const std::string& real, std::string_view text) {
  return state_dir + "/allowed-policies/" + sha256_hex(real + "\n" + sha256_hex(text));
}

constexpr std::string_view kRepositoryPolicy = "/.airlock/policy.json";
constexpr off_t kMaxRepositoryPolicyBytes = 1 << 20;

// A directory (not a symlink to one) owned by this user or root: where a repository policy may be.
bool owned_directory(const std::string& path) {
  struct stat st{};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && (st.st_uid == ::geteuid() || st.st_uid == 0);
}

}  // namespace

std::optional<std::string> repository_policy(const std::string& dir) {
  // The nearest .airlock above the workspace, normally at the repository's root. Not bounded by a
  // `.git`: a command may make an empty .git below the root (its contents are the agent's), and
  // that must not hide the repository's policy from the next run started there. `.airlock` itself
  // is protected at any depth, so no command can put a nearer one in the way.
  char buf[PATH_MAX];
  std::string d = ::realpath(dir.c_str(), buf) ? std::string(buf) : absolute_path(dir);
  for (;;) {
    std::string at = (d == "/" ? "" : d) + "/.airlock";
    struct stat st{};
    // A symlink is found (and refused when read); another user's directory is passed over.
    if (::lstat(at.c_str(), &st) == 0 && (S_ISLNK(st.st_mode) || (owned_directory(at) && exists(at + "/policy.json"))))
      return (d == "/" ? "" : d) + std::string(kRepositoryPolicy);
    if (d == "/" || d.empty()) return std::nullopt;
    auto slash = d.rfind('/');
    d = slash == 0 ? "/" : d.substr(0, slash);
  }
}

Result<std::string> read_repository_policy(const std::string& file) {
  auto refused = [&](const std::string& why) {
    return fail(Code::PolicyUntrusted, fmt::format("the repository policy {} {}", file, why), {{"source", file}});
  };
  if (!file.ends_with(kRepositoryPolicy) || file.front() != '/') return refused("is not DIR/.airlock/policy.json");
  std::string root = file.substr(0, file.size() - kRepositoryPolicy.size());
  // Opened step by step without following a symlink: the bytes read are the bytes of this very
  // repository's file, never another one's (a `.airlock` linking to a repository the user trusts).
  UniqueFd dir(::open(root.empty() ? "/" : root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return fail_errno(Code::PolicyInvalid, fmt::format("opening {}", root), errno);
  UniqueFd at(::openat(dir.get(), ".airlock", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!at) return refused(fmt::format("cannot be opened without following a symlink ({})", std::strerror(errno)));
  UniqueFd fd(::openat(at.get(), "policy.json", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) return refused(fmt::format("cannot be opened without following a symlink ({})", std::strerror(errno)));
  struct stat st{};
  if (::fstat(fd.get(), &st) < 0 || !S_ISREG(st.st_mode)) return refused("is not a regular file");
  if (st.st_uid != ::geteuid() && st.st_uid != 0) return refused("belongs to another user");
  if (st.st_size > kMaxRepositoryPolicyBytes) return refused("is larger than 1 MiB");
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

PolicyLayers find_policy_layers(const std::optional<std::string>& defaults_flag,
                                const std::optional<std::string>& policy_flag,
                                const std::optional<std::string>& discover_from) {
  PolicyLayers l;
  if (defaults_flag) l.defaults = PolicyLayer{"--defaults", *defaults_flag};
  else if (discover_from)
    if (auto f = user_policy()) l.defaults = PolicyLayer{"user", *f};
  if (policy_flag) l.task = PolicyLayer{"--policy", *policy_flag};
  else if (discover_from)
    if (auto f = repository_policy(*discover_from)) l.task = PolicyLayer{"repository", *f};
  return l;
}

Result<void> allow_repository_policy(const std::string& state_dir, const std::string& file, std::string_view text) {
  TRY(make_dirs(state_dir + "/allowed-policies", 0700));
  Json record = {{"file", file}, {"sha256", sha256_hex(text)}};
  return write_file_atomic(allow_record(state_dir, file, text), record.dump() + "\n", 0600);
}

Result<LayeredPolicy> read_policy_layers(const PolicyLayers& layers, const std::string& state_dir) {
  std::optional<std::string> defaults_file;
  if (layers.defaults) defaults_file = layers.defaults->file;
  LayeredPolicy l;
  l.below_task = TRY(policy::load_effective(defaults_file, std::nullopt));
  l.policy = l.below_task;
  if (!layers.task) return l;
  const std::string& file = layers.task->file;
  // One read: the bytes judged (and allowed) are the bytes parsed.
  bool repository = layers.task->origin == "repository";
  auto text = repository ? read_repository_policy(file) : read_file(file, Code::PolicyInvalid);
  if (!text) return std::unexpected(std::move(text).error().context("policy file").fact("source", file));
  l.policy = TRY(policy::parse_layer_text(*text, l.below_task, file));
  if (repository) {
    auto wider = policy::widenings(l.policy, l.below_task);
    if (!wider.empty() && !exists(allow_record(state_dir, file, *text))) l.untrusted = std::move(wider);
  }
  l.task_text = std::move(*text);
  return l;
}

Result<policy::TaskPolicy> load_policy(const PolicyLayers& layers, const std::string& state_dir, bool agent_run) {
  auto l = TRY(read_policy_layers(layers, state_dir));
  if (!l.untrusted.empty()) {
    const std::string& real = layers.task->file;
    Json what = Json::array();
    for (const auto& w : l.untrusted) what.push_back(w.to_json());
    size_t more = l.untrusted.size() - 1;
    return fail(Code::PolicyUntrusted,
                fmt::format("the repository's policy {} allows more than your own ({}{}); read it "
                            "(`airlock policy show`), then `airlock policy allow {}` to trust this version, "
                            "or pass --policy",
                            real, l.untrusted.front().what, more ? fmt::format(", and {} more", more) : "", real),
                {{"source", real}, {"sha256", sha256_hex(*l.task_text)}, {"widenings", what}});
  }
  if (l.policy.confinement == policy::Confinement::Vendor && !agent_run)
    return fail(Code::PolicyInvalid,
                "confinement vendor applies to `airlock agent run` only; this verb always confines",
                {{"path", "$.confinement"}});
  return std::move(l.policy);
}

Result<policy::TaskPolicy> load_policy(const std::optional<std::string>& defaults_file,
                                       const std::optional<std::string>& policy_file, bool agent_run) {
  return load_policy(find_policy_layers(defaults_file, policy_file, std::nullopt), "", agent_run);
}

std::string yes_no(bool b) { return b ? "yes" : "no"; }

Result<SessionStart> prepare_session(const Globals& g, const std::optional<std::string>& defaults_file,
                                     const std::optional<std::string>& policy_file, bool agent_run,
                                     const std::optional<std::string>& discover_from) {
  auto profile = TRY(parse_profile(g.profile));
  auto state = TRY(resolve_state_dir(g.state_dir));
  auto layers = find_policy_layers(defaults_file, policy_file, discover_from);
  auto pol = TRY(load_policy(layers, state, agent_run));
  plan::HostFacts facts = exec::facts_for(pol, exec::HostProbe(state));
  return SessionStart{profile, std::move(state), std::move(pol), std::move(facts), std::move(layers)};
}

namespace {

// What CLI11 (Option::_add_result) makes of one argument of a repeating option: "[x,y]" its
// parts, each read again, empty ones dropped; anything else itself.
void cli11_reading(const std::string& a, std::vector<std::string>& out) {
  if (a.size() >= 2 && a.front() == '[' && a.back() == ']') {
    std::string_view inner(a.data() + 1, a.size() - 2);
    for (size_t at = 0; at <= inner.size();) {
      size_t comma = std::min(inner.find(',', at), inner.size());
      if (comma > at) cli11_reading(std::string(inner.substr(at, comma - at)), out);
      at = comma + 1;
    }
    return;
  }
  out.push_back(a);
}

}  // namespace

std::vector<std::string> as_typed(const std::vector<std::string>& raw, const std::vector<std::string>& parsed) {
  // The longest suffix of the raw arguments that reads as `parsed` (the command is all the
  // arguments from its first word on; the "--" before it, if any, is not read into it).
  std::vector<std::string> reading;
  size_t best = raw.size() + 1;
  for (size_t k = raw.size(); k-- > 0;) {
    reading.clear();
    for (size_t i = k; i < raw.size(); ++i) cli11_reading(raw[i], reading);
    // An argument that reads as nothing right after an option may be that option's value (`--slot
    // '[]'`): the command is not extended over it.
    std::vector<std::string> alone;
    cli11_reading(raw[k], alone);
    if (alone.empty() && k > 0 && raw[k - 1].starts_with("-") && best <= raw.size()) break;
    if (reading == parsed) best = k;
    else if (reading.size() > parsed.size() && best <= raw.size()) break;
  }
  if (best > raw.size()) return parsed;  // not found: as parsed (never expected)
  return {raw.begin() + static_cast<std::ptrdiff_t>(best), raw.end()};
}

StopSignalWaiter::StopSignalWaiter(const sigset_t& mask, std::function<void()> on_stop)
    : sigfd_(::signalfd(-1, &mask, SFD_CLOEXEC)), donefd_(::eventfd(0, EFD_CLOEXEC)) {
  thread_ = std::thread([this, on_stop = std::move(on_stop)] {
    pollfd fds[2] = {{sigfd_.get(), POLLIN, 0}, {donefd_.get(), POLLIN, 0}};
    while (::poll(fds, 2, -1) >= 0 || errno == EINTR) {
      if (fds[1].revents & POLLIN) return;
      if (fds[0].revents & POLLIN) {
        signalfd_siginfo si{};
        (void)!::read(sigfd_.get(), &si, sizeof si);
        on_stop();
      }
    }
  });
}

void StopSignalWaiter::done() {
  if (!thread_.joinable()) return;
  uint64_t one = 1;
  (void)!::write(donefd_.get(), &one, sizeof one);
  thread_.join();
}

sigset_t block_stop_signals(bool operator_kill) {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGHUP);
  if (operator_kill) sigaddset(&mask, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  return mask;
}

}  // namespace airlock::cli
