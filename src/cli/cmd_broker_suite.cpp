// `airlock broker-suite [--json]`: the broker attack matrix, each attack with its plain-API baseline.
#include <cstdio>

#include "broker/attack_suite.h"
#include "cli/verbs.h"
#include "exec/planner.h"

namespace airlock::cli {
namespace {

int suite_verb(Globals& g) {
  auto state = resolve_state_dir(g.state_dir);
  if (!state) return refuse(state.error(), g.json);
  broker::AttackSuiteOptions o{*state, exec::HostProbe(*state, exec::HostProbe::Measure::Fresh).facts(plan::FactNeeds::all())};
  auto results = broker::run_attack_suite(o);
  if (!results) return refuse(results.error(), g.json);
  bool all = true;
  for (const auto& r : *results) all = all && r.contained && r.baseline_breached;
  if (g.json) {
    Json j = Json::array();
    for (const auto& r : *results) j.push_back(r.to_json());
    std::printf("%s\n", Json({{"attacks", j}, {"all_contained_and_proven", all}}).dump(2).c_str());
  } else {
    std::printf("%-38s %-28s %-28s %-10s %s\n", "ATTACK", "EXPECTED", "BROKER", "CONTAINED", "WITHOUT BROKER");
    for (const auto& r : *results)
      std::printf("%-38s %-28s %-28s %-10s %s\n", r.name.c_str(), r.expected.c_str(), r.broker.c_str(),
                  r.contained ? "yes" : "NO", r.baseline_breached ? "breached" : "NOT BREACHED (probe proves nothing)");
    std::printf("%zu attacks: %s\n", results->size(),
                all ? "every one contained by the broker and breaching without it" : "SOME ATTACKS FAILED");
  }
  return all ? 0 : 1;
}

}  // namespace

void add_broker_suite(CLI::App& app, Globals& g, Action& run) {
  auto* cmd = app.add_subcommand("broker-suite", "run the broker attack suite and print the matrix");
  cmd->add_flag("--json", g.json, "print JSON");
  cmd->callback([&g, &run] { run = [&g] { return suite_verb(g); }; });
}

}  // namespace airlock::cli
