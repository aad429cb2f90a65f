// OwnedExecutor: a plan, the session directories and view made for it, and the executor prepared
// on them, torn down together. broker::Session builds its sandbox this way; `airlock tool call`
// and the tests that drive executors directly use it with no broker around it.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "base/error.h"
#include "exec/executor.h"
#include "exec/session_view.h"
#include "plan/plan.h"
#include "policy/task_policy.h"

namespace airlock::exec {

struct OwnedExecutor {
  std::string id;
  plan::ExecutionPlan plan;
  SessionDirs dirs;
  ViewCopy view;  // what the view was made of (its manifest, what was skipped)
  std::unique_ptr<Executor> executor;

  OwnedExecutor() = default;
  OwnedExecutor(OwnedExecutor&& o) noexcept;
  OwnedExecutor& operator=(OwnedExecutor&&) = delete;
  // Stops whatever still runs and removes the session directories.
  ~OwnedExecutor();
};

// Sweeps sessions abandoned under `state_dir`, makes session `id`'s directories (the view copied
// from `workspace` when it is not empty) and prepares `plan`'s executor, with `door` serving a
// plan's network door. Fails closed: nothing runs unless every step succeeded, and what was made
// is removed.
Result<OwnedExecutor> build_owned_executor(plan::ExecutionPlan plan, const std::string& state_dir, std::string id,
                                           const std::string& workspace, DoorStarter door = {});

// Plans `policy` on `facts` (refusing as the planner does), then build_owned_executor under a
// fresh id.
Result<OwnedExecutor> open_owned_executor(const policy::TaskPolicy& policy, const plan::HostFacts& facts,
                                          plan::Profile profile, const std::string& state_dir,
                                          const std::optional<std::string>& workspace = std::nullopt,
                                          size_t vm_pool = 0);

}  // namespace airlock::exec
