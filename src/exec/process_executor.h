// The process executors: the host, landlock and namespaces tiers, one supervised mechanism whose
// tier plan says which steps apply (exec::executors() lists them).
#pragma once

#include <memory>
#include <string>

#include "base/error.h"
#include "exec/executor.h"
#include "plan/plan.h"

namespace airlock::exec {

// Prepares a process executor for a plan of the host, landlock or namespaces tier (an
// ExecutorFactory). Another tier's plan is AIRLOCK_INTERNAL_ERROR: the registry sends it elsewhere.
Result<std::unique_ptr<Executor>> make_process_executor(const plan::ExecutionPlan& plan, const SessionDirs& dirs,
                                                        const std::string& session_id, const std::string& workspace,
                                                        DoorStarter door);

}  // namespace airlock::exec
