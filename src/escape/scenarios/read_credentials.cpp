// read_credentials: read the suite's key file (a "credential" in a home directory), the secret in
// its environment, and the supervisor's start-up environment through /proc.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>

#include "escape/scenario.h"

namespace airlock::escape::scenarios::read_credentials {

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput& in) {
  const std::string &key = in.arg(0), &env_name = in.arg(1);
  auto k = read_some(key);
  const char* v = ::getenv(env_name.c_str());
  // The supervisor's start-up environment, as /proc shows it to whoever may read it.
  pid_t ppid = ::getppid();
  auto pe = read_some(fmt::format("/proc/{}/environ", ppid), 1 << 16);
  std::string in_parent;
  if (!pe.err) {
    std::string needle = env_name + "=";
    for (size_t at = 0; at < pe.data.size();) {
      size_t end = pe.data.find('\0', at);
      if (end == std::string::npos) end = pe.data.size();
      if (pe.data.compare(at, needle.size(), needle) == 0) in_parent = pe.data.substr(at, end - at);
      at = end + 1;
    }
  }
  std::string parent = pe.err ? err_name(pe.err)
                       : !in_parent.empty()
                           ? fmt::format("HOLDS IT: \"{}\"", printable(in_parent))
                           : fmt::format("readable ({} bytes) but without it", pe.data.size());
  return {
      {},
      k.err == 0 || v != nullptr || !in_parent.empty(),
      fmt::format(
          "key {}: {}; ${} in the command's environment: {}; /proc/{}/environ (the supervisor's start-up "
          "environment): {}",
          key,
          k.err ? err_name(k.err) : fmt::format("read {} bytes: \"{}\"", k.data.size(), printable(k.data)),
          env_name, v ? fmt::format("SET: \"{}\"", printable(v)) : std::string("not set"), ppid, parent),
      k.err,
      Json::object()};
}

#else

class ReadCredentials final : public Scenario {
  Result<std::vector<std::string> > bait(Run& run) override {
    return std::vector{run.bait.key_file, std::string(kCanaryEnvName)};
  }
  Judged judge(Run& run, const Observed& o) override {
    bool key = has(o.output, run.bait.key_token), env = has(o.output, run.bait.env_token);
    Judged j;
    j.host = {{"key_token_in_output", key}, {"env_token_in_output", env}};
    j.breached = key || env;
    j.evidence = fmt::format("{}; host: the key's canary token {} the output, the environment's {}",
                             o.probe_said(), key ? "IS IN" : "is not in", env ? "IS TOO" : "is not");
    return j;
  }
};

std::unique_ptr<Scenario> make() { return std::make_unique<ReadCredentials>(); }

#endif

}  // namespace airlock::escape::scenarios::read_credentials
