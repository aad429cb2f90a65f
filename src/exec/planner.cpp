// planner: host facts from one source, and the one plan a session runs under.
#include "exec/planner.h"

#include "exec/executor.h"
#include "exec/session_view.h"
#include "exec/vm_image.h"
#include "linux/probe.h"

namespace airlock::exec {

plan::HostFacts HostProbe::facts(const plan::FactNeeds& needs) const {
  std::lock_guard lk(mu_);
  plan::HostFacts f = linux::probe_host(needs);
  if (needs.kvm) probe_microvm(f, state_dir_);
  return f;
}

plan::HostFacts facts_for(const policy::TaskPolicy& policy, const FactSource& source) {
  return source.facts(plan::fact_needs(policy, built_tiers()));
}

Result<plan::ExecutionPlan> plan_session(const policy::TaskPolicy& policy, const plan::HostFacts& facts,
                                         const PlanContext& context) {
  auto planned = TRY(plan::plan_execution(policy, facts, context.profile, built_tiers()));
  if (auto* vm = std::get_if<plan::MicrovmTierPlan>(&planned.confinement)) vm->guest.pool = context.vm_pool;
  apply_test_seams(planned);
  protect_git_config_targets(context.workspace, planned);
  return planned;
}

}  // namespace airlock::exec
