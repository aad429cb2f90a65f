// Executor helpers shared by every executor.
#include "exec/executor.h"

#include <unistd.h>

#include "policy/task_policy.h"

namespace airlock::exec {

Json RunOutcome::to_json() const {
  return {{"program", program},
          {"exit_code", status.signaled ? Json(nullptr) : Json(status.code)},
          {"signal", status.signaled ? Json(status.signal) : Json(nullptr)},
          {"status", status.shell_status()},
          {"timed_out", timed_out},
          {"budget_exhausted", budget_exhausted},
          {"stopped", stopped},
          {"descendants_killed", descendants_killed},
          {"wall_ms", wall_ms},
          {"cpu_user_us", user_us},
          {"cpu_system_us", system_us},
          {"max_rss_kb", max_rss_kb},
          {"teardown_ms", teardown_ms},
          {"teardown_verified", teardown_verified}};
}

Result<std::string> resolve_program(const std::string& name, const std::string& cwd) {
  if (name.empty()) return fail(Code::PolicyInvalid, "empty command");
  if (name.find('/') != std::string::npos) {
    std::string p = name[0] == '/' ? name : cwd + "/" + name;
    if (::access(p.c_str(), X_OK) < 0)
      return fail(Code::ToolFailed, fmt::format("{} is not an executable file", name), {{"program", name}});
    return name;
  }
  auto r = policy::resolve_trusted(name);
  if (!r)
    return fail(Code::ToolFailed,
                fmt::format("{} is not on the trusted PATH {}", name, policy::kTrustedPath),
                {{"program", name}, {"trusted_path", policy::kTrustedPath}});
  return r;
}

}  // namespace airlock::exec
