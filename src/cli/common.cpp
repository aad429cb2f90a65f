// CLI plumbing: state directory, profile, refusal printing, policy loading.
#include "cli/common.h"

#include <sys/stat.h>
#include <limits.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "base/custody.h"
#include "base/encoding.h"
#include "base/fs.h"
#include "base/hash.h"
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

Result<std::string> real_path_of(const std::string& file) {
  char buf[PATH_MAX];
  if (!::realpath(file.c_str(), buf)) return fail_errno(Code::PolicyInvalid, fmt::format("policy file {}", file), errno);
  return std::string(buf);
}

}  // namespace

std::optional<std::string> repository_policy(const std::string& dir) {
  char buf[PATH_MAX];
  std::string start = ::realpath(dir.c_str(), buf) ? std::string(buf) : absolute_path(dir);
  std::string root = start;
  for (std::string d = start;;) {
    if (exists(d + "/.git")) {
      root = d;
      break;
    }
    if (d == "/" || d.empty()) break;
    auto slash = d.rfind('/');
    d = slash == 0 ? "/" : d.substr(0, slash);
  }
  std::string file = (root == "/" ? "" : root) + "/.airlock/policy.json";
  return exists(file) ? std::optional(file) : std::nullopt;
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
  std::string real = TRY(real_path_of(file));
  TRY(make_dirs(state_dir + "/allowed-policies", 0700));
  Json record = {{"file", real}, {"sha256", sha256_hex(text)}};
  return write_file_atomic(allow_record(state_dir, real, text), record.dump() + "\n", 0600);
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
  auto text = read_file(file, Code::PolicyInvalid);
  if (!text) return std::unexpected(std::move(text).error().context("policy file").fact("source", file));
  l.policy = TRY(policy::parse_layer_text(*text, l.below_task, file));
  if (layers.task->origin == "repository") {
    auto wider = policy::widenings(l.policy, l.below_task);
    std::string real = TRY(real_path_of(file));
    if (!wider.empty() && !exists(allow_record(state_dir, real, *text))) l.untrusted = std::move(wider);
  }
  l.task_text = std::move(*text);
  return l;
}

Result<policy::TaskPolicy> load_policy(const PolicyLayers& layers, const std::string& state_dir, bool agent_run) {
  auto l = TRY(read_policy_layers(layers, state_dir));
  if (!l.untrusted.empty()) {
    std::string real = TRY(real_path_of(layers.task->file));
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
