// Executor helpers shared by every executor.
#include "exec/executor.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>

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
          {"supervisor_limits_changed", supervisor_limits_changed},
          {"teardown_ms", teardown_ms},
          {"teardown_verified", teardown_verified},
          {"built_ahead", built_ahead}};
}

std::string workspace_inside(const std::string& workspace) {
  if (workspace.empty()) return "/workspace";
  for (const char* reserved : {"/tmp", "/proc", "/dev", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32",
                               "/lib64", "/libx32"}) {
    std::string r = reserved;
    if (workspace == r || workspace.rfind(r + "/", 0) == 0) return "/workspace";
  }
  return workspace == "/" ? "/workspace" : workspace;
}

Result<std::string> sandbox_path(const std::string& host, const SessionDirs& dirs,
                                 const std::optional<std::string>& inside) {
  if (host.empty()) return inside ? *inside : dirs.view;
  auto beneath = [&](const std::string& dir) -> std::optional<std::string> {
    if (host == dir) return std::string();
    if (host.starts_with(dir + "/") && host.find("/..") == std::string::npos) return host.substr(dir.size());
    return std::nullopt;
  };
  if (auto rest = beneath(dirs.scratch)) return inside ? "/tmp" + *rest : host;
  if (auto rest = beneath(dirs.view)) return inside ? *inside + *rest : host;
  return fail(Code::PolicyInvalid,
              fmt::format("the working directory {} is neither in the session's view nor in its scratch directory",
                          host),
              {{"cwd", host}});
}

std::vector<std::string> sandbox_environment(const plan::ExecutionPlan& plan, const std::string& home,
                                             const std::string& tmp, const std::string& pwd,
                                             const std::string& session_id) {
  std::vector<std::string> env = {std::string("PATH=") + std::string(policy::kTrustedPath), "HOME=" + home,
                                  "TMPDIR=" + tmp, "PWD=" + pwd, "AIRLOCK_SESSION=" + session_id};
  for (const auto& name : plan.env_passthrough)
    if (const char* v = ::getenv(name.c_str())) env.push_back(name + "=" + v);
  return env;
}

Result<std::string> resolve_program(const std::string& name, const std::string& cwd) {
  if (name.empty()) return fail(Code::PolicyInvalid, "empty command");
  if (name.find('/') != std::string::npos) {
    std::string p = name[0] == '/' ? name : cwd + "/" + name;
    if (::access(p.c_str(), X_OK) < 0) {
      int err = errno;
      return std::unexpected(command_not_started(name, fmt::format("{} is not an executable file", name), err));
    }
    return name;
  }
  auto r = policy::resolve_trusted(name);
  if (!r) {
    Error e = command_not_started(name, fmt::format("{} is not on the trusted PATH {}", name, policy::kTrustedPath),
                                  ENOENT);
    e.facts["trusted_path"] = policy::kTrustedPath;
    return std::unexpected(std::move(e));
  }
  return r;
}

namespace {
// The fact command_not_started writes and not_started_status reads: the one place either knows it.
constexpr const char* kShellStatusFact = "shell_status";
}  // namespace

Error command_not_started(const std::string& program, std::string message, int err) {
  // As POSIX shells decide (bash's execute_cmd.c, dash's exec.c): only a program that is not
  // there is 127; anything else that stops exec is 126.
  int status = err == ENOENT || err == ENOTDIR ? 127 : 126;
  Error e = fail_errno(Code::ToolFailed, std::move(message), err).error();
  e.facts["program"] = program;
  e.facts[kShellStatusFact] = status;
  return e;
}

std::optional<int> not_started_status(const Error& e) {
  if (e.code != Code::ToolFailed) return std::nullopt;
  auto it = e.facts.find(kShellStatusFact);
  if (it == e.facts.end() || !it->is_number_integer()) return std::nullopt;
  int status = it->get<int>();
  if (status != 126 && status != 127) return std::nullopt;
  return status;
}

}  // namespace airlock::exec
