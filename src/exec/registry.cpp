// The executor registry: the tiers this build implements, each with the factory that prepares it.
#include <algorithm>
#include <vector>

#include "exec/executor.h"
#include "exec/container_executor.h"
#include "exec/microvm_executor.h"
#include "exec/process_executor.h"

namespace airlock::exec {
namespace {

// In order of isolation. A new tier is a row here, an alternative of plan::TierPlan and its
// planning in plan/plan.cpp (docs/architecture.md, "How to add a tier").
constexpr ExecutorEntry kExecutors[] = {
    {policy::ExecutorKind::Host, make_process_executor},
    {policy::ExecutorKind::Landlock, make_process_executor},
    {policy::ExecutorKind::Namespaces, make_process_executor},
    {policy::ExecutorKind::Container, make_container_executor},
    {policy::ExecutorKind::Microvm, make_microvm_executor},
};

}  // namespace

std::span<const ExecutorEntry> executors() { return kExecutors; }

plan::BuiltTiers built_tiers() {
  static const std::vector<policy::ExecutorKind> kinds = [] {
    std::vector<policy::ExecutorKind> out;
    for (const auto& e : kExecutors) out.push_back(e.kind);
    return out;
  }();
  return kinds;
}

Result<std::unique_ptr<Executor>> make_executor(const plan::ExecutionPlan& plan, const SessionDirs& dirs,
                                                const std::string& session_id, const std::string& workspace,
                                                DoorStarter door) {
  policy::ExecutorKind kind = plan.executor();
  auto it = std::find_if(std::begin(kExecutors), std::end(kExecutors), [&](const auto& e) { return e.kind == kind; });
  if (it == std::end(kExecutors))
    return fail(Code::ExecutorUnavailable,
                fmt::format("no executor implements the {} tier in this build", policy::to_string(kind)),
                {{"executor", policy::to_string(kind)}});
  return it->make(plan, dirs, session_id, workspace, std::move(door));
}

}  // namespace airlock::exec
