// planner: host facts from one source, and the one plan a session runs under.
#include "exec/planner.h"


#include "base/clock.h"
#include "exec/container_engine.h"
#include "exec/executor.h"
#include "exec/facts_cache.h"
#include "exec/session_view.h"
#include "exec/vm_image.h"
#include "linux/probe.h"

namespace airlock::exec {

plan::HostFacts HostProbe::facts(const plan::FactNeeds& needs) const {
  std::lock_guard lk(mu_);
  plan::HostFacts f;
  auto key = facts_cache_key();
  auto cached = key ? load_cached_facts(state_dir_, *key) : std::nullopt;
  if (measure_ == Measure::PerBoot && cached && covers(cached->measured, needs)) {
    f = std::move(cached->facts);
    const std::string when = utc_text(static_cast<int64_t>(cached->measured_at) * 1000000);
    f.reasons[std::string(kFactsCachedReason)] = fmt::format(
        "measured at {} and kept for this boot in {}/{}, re-measured when the host or the caller changes; "
        "`airlock doctor` measures afresh",
        when, state_dir_, kFactsCacheFile);
  } else {
    // What the cache measured before stays measured, so policies that need different facts do
    // not take turns re-probing.
    plan::FactNeeds scope = needs;
    if (cached) {
      scope.user_namespaces |= cached->measured.user_namespaces;
      scope.overlayfs |= cached->measured.overlayfs;
      scope.cgroups |= cached->measured.cgroups;
      scope.kvm |= cached->measured.kvm;
    }
    f = linux::probe_host(scope);
    if (key) store_cached_facts(state_dir_, *key, {scope, f});
  }
  if (needs.kvm) probe_microvm(f, state_dir_);
  if (needs.container) probe_container(f, state_dir_, measure_ == Measure::Fresh);
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
