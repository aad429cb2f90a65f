// The container executor: each command in a fresh container of the plan's pinned image, run by
// the engine (exec/container_engine.h) as a one-shot and removed after it ends.
#pragma once

#include <memory>
#include <string>

#include "base/error.h"
#include "exec/executor.h"
#include "plan/plan.h"

namespace airlock::exec {

// An ExecutorFactory for the container tier's plan. Another tier's plan is AIRLOCK_INTERNAL_ERROR.
Result<std::unique_ptr<Executor>> make_container_executor(const plan::ExecutionPlan& plan, const SessionDirs& dirs,
                                                          const std::string& session_id, const std::string& workspace,
                                                          DoorStarter door);

}  // namespace airlock::exec
