// The doctor's report (`airlock doctor --json`, GET /v1/executors): every executor, available or
// not and why, and what policies would run here. Shared by airlock and airlock-serve.
#include "cli/verbs.h"
#include "exec/executor.h"
#include "exec/planner.h"

namespace airlock::cli {
namespace {

struct Scenario {
  const char* label;
  policy::Workload workload;
  policy::Tenancy tenancy;
  policy::NetworkMode network;
};

constexpr Scenario kScenarios[] = {
    {"trusted_toolchain, single_tenant, code network off", policy::Workload::TrustedToolchain,
     policy::Tenancy::SingleTenant, policy::NetworkMode::Off},
    {"trusted_toolchain, single_tenant, code network allowlist", policy::Workload::TrustedToolchain,
     policy::Tenancy::SingleTenant, policy::NetworkMode::Allowlist},
    {"trusted_toolchain, multi_tenant", policy::Workload::TrustedToolchain, policy::Tenancy::MultiTenant,
     policy::NetworkMode::Off},
    {"untrusted_code", policy::Workload::UntrustedCode, policy::Tenancy::SingleTenant, policy::NetworkMode::Off},
};

Json outcome_json(const Result<plan::ExecutionPlan>& r) {
  if (r) return {{"runs_on", policy::to_string(r->executor())}, {"tier", r->tier()}};
  return {{"refused", r.error().to_json()}};
}

}  // namespace

Json doctor_report(plan::Profile profile, const plan::HostFacts& facts) {
  // Every tier this build implements (exec's registry); a tier it does not is no executor here.
  plan::BuiltTiers built = exec::built_tiers();
  Json executors = Json::array();
  for (auto k : built) {
    auto c = plan::assess(k, facts, profile, built);
    executors.push_back({{"executor", policy::to_string(k)},
                         {"level", plan::isolation_level(k)},
                         {"available", c.available},
                         {"reason", c.reason}});
  }
  policy::TaskPolicy def = policy::builtin_default();
  Json scenarios = Json::array();
  for (const auto& s : kScenarios) {
    policy::TaskPolicy p = def;
    p.workload = s.workload;
    p.tenancy = s.tenancy;
    p.code_network.mode = s.network;
    if (s.network == policy::NetworkMode::Allowlist)
      p.code_network.rules = {policy::EgressRule{"example.com", std::nullopt, {443}, {"https"}, false}};
    scenarios.push_back({{"policy", s.label}, {"outcome", outcome_json(plan::plan_execution(p, facts, profile, built))}});
  }
  return {{"profile", plan::to_string(profile)},
          {"host_facts", plan::to_json(facts)},
          {"executors", executors},
          {"builtin_default", outcome_json(plan::plan_execution(def, facts, profile, built))},
          {"protected_paths", policy::to_json(def.protected_paths)},
          {"denied_names", def.denied_names},
          {"scenarios", scenarios}};
}

}  // namespace airlock::cli
