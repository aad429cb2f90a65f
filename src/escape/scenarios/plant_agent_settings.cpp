// plant_agent_settings: plant for later hooks in .claude/settings.json, a server in .mcp.json and a
// task in .vscode/tasks.json: what an agent or an editor runs once the session is over.
#include "escape/scenarios/plant_common.h"

namespace airlock::escape::scenarios::plant_agent_settings {

// Under out/, the suite's one write-back path, as a real repository or home holds them.
constexpr std::string_view kTargets[] = {"out/.claude/settings.json", "out/.mcp.json",
                                         "out/.vscode/tasks.json"};

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput& in) { return plant(kTargets, in); }

#else

std::unique_ptr<Scenario> make() { return std::make_unique<Plant>(kTargets); }

#endif

}  // namespace airlock::escape::scenarios::plant_agent_settings
