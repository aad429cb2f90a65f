// CLI plumbing: state directory, profile, refusal printing, policy loading.
#include "cli/common.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "base/custody.h"
#include "base/encoding.h"
#include "base/fs.h"
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

Result<policy::TaskPolicy> load_policy(const std::optional<std::string>& defaults_file,
                                       const std::optional<std::string>& policy_file, bool agent_run) {
  auto pol = TRY(policy::load_effective(defaults_file, policy_file));
  if (pol.confinement == policy::Confinement::Vendor && !agent_run)
    return fail(Code::PolicyInvalid,
                "confinement vendor applies to `airlock agent run` only; this verb always confines",
                {{"path", "$.confinement"}});
  return pol;
}

std::string yes_no(bool b) { return b ? "yes" : "no"; }

Result<SessionStart> prepare_session(const Globals& g, const std::optional<std::string>& defaults_file,
                                     const std::optional<std::string>& policy_file, bool agent_run) {
  auto profile = TRY(parse_profile(g.profile));
  auto pol = TRY(load_policy(defaults_file, policy_file, agent_run));
  auto state = TRY(resolve_state_dir(g.state_dir));
  plan::HostFacts facts = exec::facts_for(pol, exec::HostProbe(state));
  return SessionStart{profile, std::move(state), std::move(pol), std::move(facts)};
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
