// plant_git_hook: plant for later a pre-commit hook, and core.fsmonitor in .git/config: what git
// runs in the workspace once the session is over.
#include "escape/scenarios/plant_common.h"

namespace airlock::escape::scenarios::plant_git_hook {

// Under out/, the suite's one write-back path, as a real repository or home holds them.
constexpr std::string_view kTargets[] = {"out/.git/hooks/pre-commit", "out/.git/config"};

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput& in) { return plant(kTargets, in); }

#else

std::unique_ptr<Scenario> make() { return std::make_unique<Plant>(kTargets); }

#endif

}  // namespace airlock::escape::scenarios::plant_git_hook
