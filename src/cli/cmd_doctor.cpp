// `airlock doctor`: every executor, available or not and why, and what policies would run here.
#include <unistd.h>

#include <cstdio>

#include <fmt/ranges.h>

#include "base/encoding.h"
#include "cli/verbs.h"
#include "exec/executor.h"
#include "exec/planner.h"

namespace airlock::cli {
namespace {

// The same line from the report's JSON, so the text and --json cannot disagree.
std::string outcome_text(const Json& o) {
  if (o.contains("runs_on")) return fmt::format("runs on {} (level {})", o["runs_on"].get<std::string>(), o["tier"].get<int>());
  return fmt::format("refused: {}", o["refused"]["code"].get<std::string>());
}

}  // namespace

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
      // The fleet's machines as this machine judges them (a store that cannot be read is said, not fatal).
      auto machines = fleet_machines(g, *state);
      report["machines"] = machines ? *machines : Json::array();
      if (!machines) report["machines_error"] = machines.error().to_json();
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
      if (!machines) {
        std::printf("\nother machines: the store cannot be read: %s\n",
                    escape_for_terminal(machines.error().message).c_str());
      } else if (!machines->empty()) {
        // Text from the store is anyone's with the database: escaped for the terminal.
        std::printf("\nother machines (`airlock machine list`; isolation is what the escape suite showed there):\n");
        for (const auto& m : *machines)
          std::printf("  %-16s %-10s %s\n", escape_for_terminal(m.value("id", std::string())).c_str(),
                      m.value("isolation", std::string("none")).c_str(),
                      escape_for_terminal(m.value("isolation_why", std::string())).c_str());
      }
      return 0;
    };
  });
}

}  // namespace airlock::cli
