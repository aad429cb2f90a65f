// OwnedExecutor: an executor with session directories of its own and no broker around it, for
// `airlock tool call` and the tests that drive executors directly.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "base/error.h"
#include "exec/executor.h"
#include "plan/plan.h"
#include "policy/task_policy.h"

namespace airlock::exec {

struct OwnedExecutor {
  std::string id;
  plan::ExecutionPlan plan;
  SessionDirs dirs;
  std::unique_ptr<Executor> executor;

  OwnedExecutor() = default;
  OwnedExecutor(OwnedExecutor&& o) noexcept;
  OwnedExecutor& operator=(OwnedExecutor&&) = delete;
  // Stops whatever still runs and removes the session directories.
  ~OwnedExecutor();
};

// Plans `policy` on `facts` (refusing as the planner does), sweeps sessions abandoned under
// `state_dir`, makes this one's directories (the view copied from `workspace` when given) and
// prepares the planned executor. Fails closed: nothing runs unless every step succeeded.
Result<OwnedExecutor> open_owned_executor(const policy::TaskPolicy& policy, const plan::HostFacts& facts,
                                          plan::Profile profile, const std::string& state_dir,
                                          const std::optional<std::string>& workspace = std::nullopt,
                                          size_t vm_pool = 0);

}  // namespace airlock::exec
