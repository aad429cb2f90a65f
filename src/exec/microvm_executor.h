// The microvm executor: each run boots a guest of our own (exec/vm_image.h) under QEMU, which
// itself runs confined by the namespaces tier.
#pragma once

#include <memory>
#include <string>

#include "base/error.h"
#include "exec/executor.h"
#include "plan/plan.h"

namespace airlock::exec {

// Prepares the microvm executor for a plan of the microvm tier (an ExecutorFactory; the tier has
// no door, so `door` is never used). Fails closed: an image whose digests differ from the plan's
// (checked at every boot), or a namespaces sandbox for QEMU that cannot prepare, is refused.
Result<std::unique_ptr<Executor>> make_microvm_executor(const plan::ExecutionPlan& plan, const SessionDirs& dirs,
                                                        const std::string& session_id, const std::string& workspace,
                                                        DoorStarter door);

// The QEMU command line that boots the plan's guest with the view at `inside`, the session's
// scratch directory at /tmp and the control directory /tmp/<ctl_name>. Pure.
std::vector<std::string> qemu_argv(const plan::MicrovmPlan& vm, const std::string& inside, const std::string& ctl_name);

}  // namespace airlock::exec
