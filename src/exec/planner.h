// planner: the one way from a policy and a host to an execution plan. The CLI verbs, the server,
// the escape suite and the benches take their host facts from a FactSource and their plan from
// plan_session; tests hand them fixed facts.
#pragma once

#include <mutex>
#include <string>

#include "base/error.h"
#include "plan/host_facts.h"
#include "plan/plan.h"
#include "policy/task_policy.h"

namespace airlock::exec {

// Where host facts come from.
class FactSource {
 public:
  virtual ~FactSource() = default;
  // The facts `needs` asks for (a source may give more). Never fails: what cannot be measured is
  // recorded as missing, with its reason in HostFacts::reasons.
  virtual plan::HostFacts facts(const plan::FactNeeds& needs) const = 0;
};

// This host, measured: linux::probe_host, and for the microvm tier the cached guest image and
// whether `airlock vm verify` passed with it (recorded in `state_dir`). Calls are serialised: a
// probe forks, and a daemon probes for each session it opens.
//
// PerBoot reuses the probe's answers kept in `state_dir` while their key (exec/facts_cache.h)
// still matches, and measures (and keeps) them when it does not; Fresh always measures and
// keeps what it measured. The doctor, `machine probe` and the escape suite measure Fresh.
class HostProbe final : public FactSource {
 public:
  enum class Measure { PerBoot, Fresh };
  explicit HostProbe(std::string state_dir, Measure measure = Measure::PerBoot)
      : state_dir_(std::move(state_dir)), measure_(measure) {}
  plan::HostFacts facts(const plan::FactNeeds& needs) const override;

 private:
  std::string state_dir_;
  Measure measure_;
  mutable std::mutex mu_;
};

// Facts given, not measured: tests, `airlock plan --facts FILE`, planning for another host.
class FixedFacts final : public FactSource {
 public:
  explicit FixedFacts(plan::HostFacts f) : facts_(std::move(f)) {}
  plan::HostFacts facts(const plan::FactNeeds&) const override { return facts_; }

 private:
  plan::HostFacts facts_;
};

// The facts the policy's plan depends on.
plan::HostFacts facts_for(const policy::TaskPolicy& policy, const FactSource& source);

// What a session is planned for beyond its policy and the host.
struct PlanContext {
  plan::Profile profile = plan::Profile::Production;
  std::string workspace;  // absolute; its .git/config's hook and include targets become protected
  size_t vm_pool = 0;     // the operator's microVM pool (airlock serve --vm-pool)
};

// plan::plan_execution for the tiers this build implements (built_tiers()), then what every
// session's plan holds beyond it: the microVM pool, the
// workspace's git configuration targets as protected paths, and the test seams in force (each
// listed among the plan's relaxations).
Result<plan::ExecutionPlan> plan_session(const policy::TaskPolicy& policy, const plan::HostFacts& facts,
                                         const PlanContext& context);

}  // namespace airlock::exec
