// `airlock doctor`: every executor, available or not and why, and what policies would run here.
#include <unistd.h>

#include <cstdio>

#include <fmt/ranges.h>

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

// The same line from the report's JSON, so the text and --json cannot disagree.
std::string outcome_text(const Json& o) {
  if (o.contains("runs_on")) return fmt::format("runs on {} (level {})", o["runs_on"].get<std::string>(), o["tier"].get<int>());
  return fmt::format("refused: {}", o["refused"]["code"].get<std::string>());
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

void add_doctor(CLI::App& app, Globals& g, Action& run) {
  auto* doctor = app.add_subcommand("doctor", "show which executors can run on this host and why");
  doctor->add_flag("--json", g.json, "print JSON");
  doctor->callback([&g, &run] {
    run = [&g] {
      auto profile = parse_profile(g.profile);
      if (!profile) return refuse(profile.error(), g.json);
      auto state = resolve_state_dir(g.state_dir);
      if (!state) return refuse(state.error(), g.json);
      plan::HostFacts facts = exec::HostProbe(*state, exec::HostProbe::Measure::Fresh).facts(plan::FactNeeds::all());
      Json report = doctor_report(*profile, facts);
      if (g.json) {
        std::printf("%s\n", report.dump(2).c_str());
        return 0;
      }
      const Json& executors = report["executors"];
      std::printf("airlock doctor: kernel %s, %s, profile %s\n\n", facts.kernel_release.c_str(),
                  facts.running_as_root ? "running as root" : fmt::format("running as uid {}", ::geteuid()).c_str(),
                  std::string(plan::to_string(*profile)).c_str());
      std::printf("  %-11s %-6s %-12s %s\n", "EXECUTOR", "LEVEL", "STATUS", "WHY");
      for (const auto& e : executors)
        std::printf("  %-11s %-6d %-12s %s\n", e["executor"].get<std::string>().c_str(), e["level"].get<int>(),
                    e["available"].get<bool>() ? "available" : "unavailable",
                    e["reason"].get<std::string>().c_str());
      std::string v2 = fmt::format("{}", fmt::join(facts.cgroup_v2_controllers, ","));
      std::string v1 = fmt::format("{}", fmt::join(facts.cgroup_v1_writable, ","));
      std::printf("\nmeasured: landlock ABI %d, seccomp %s, user namespaces %s, overlayfs in userns %s,\n"
                  "          cgroup v2 controllers [%s], cgroup v1 writable [%s], kvm %s\n",
                  facts.landlock_abi, yes_no(facts.seccomp_filter).c_str(), yes_no(facts.user_namespaces).c_str(),
                  yes_no(facts.overlayfs_in_userns).c_str(), v2.c_str(), v1.c_str(), yes_no(facts.kvm_usable).c_str());
      // Where this user's sandbox cgroups go on v1: its own cgroup, or what `setup delegate` made.
      if (!facts.cgroup_v1_writable.empty())
        std::printf("          cgroup v1 base: %s\n",
                    facts.cgroup_v1_base.empty() ? "below our own cgroup" : (facts.cgroup_v1_base + " (delegated)").c_str());
      for (const auto& [k, why] : facts.reasons) std::printf("          %s: %s\n", k.c_str(), why.c_str());
      const Json& def = report["builtin_default"];
      std::printf("\nthe built-in default policy %s\n", outcome_text(def).c_str());
      if (def.contains("refused")) std::printf("  %s\n", def["refused"]["message"].get<std::string>().c_str());
      std::vector<std::string> shown;
      for (const auto& e : report["protected_paths"])
        shown.push_back(e.is_string()           ? e.get<std::string>()
                        : e.contains("except") ? e["pattern"].get<std::string>() + " (all but objects, refs, logs, index, HEAD)"
                                               : e["pattern"].get<std::string>() + " (a file)");
      std::printf("\nprotected paths, built in (read-only inside every tier, refused at write-back; a policy\n"
                  "relaxes one only by naming it in writable_protected_paths):\n  %s\n",
                  fmt::format("{}", fmt::join(shown, ", ")).c_str());
      std::printf("denied names, built in (absent from the view on every tier, never written back):\n  %s\n",
                  fmt::format("{}", fmt::join(report["denied_names"].get<std::vector<std::string>>(), ", ")).c_str());
      std::printf("\npolicies by workload:\n");
      for (const auto& sc : report["scenarios"])
        std::printf("  %-58s %s\n", sc["policy"].get<std::string>().c_str(), outcome_text(sc["outcome"]).c_str());
      return 0;
    };
  });
}

}  // namespace airlock::cli
