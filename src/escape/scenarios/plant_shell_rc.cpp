// plant_shell_rc: plant for later a line in .bashrc and a new .profile: what the user's next shell
// runs once the session is over.
#include "escape/scenarios/plant_common.h"

namespace airlock::escape::scenarios::plant_shell_rc {

// Under out/, the suite's one write-back path, as a real repository or home holds them.
constexpr std::string_view kTargets[] = {"out/.bashrc", "out/.profile"};

#if AIRLOCK_PROBE_SIDE

ProbeReport probe(const ProbeInput& in) { return plant(kTargets, in); }

#else

std::unique_ptr<Scenario> make() { return std::make_unique<Plant>(kTargets); }

#endif

}  // namespace airlock::escape::scenarios::plant_shell_rc
