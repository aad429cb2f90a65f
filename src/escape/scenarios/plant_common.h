// What the plant scenarios (plant_git_hook, plant_shell_rc, plant_agent_settings) share: a file a
// host process (git, a shell, an agent or editor) would run once the session is over, planted in
// the view and straight in the workspace, and judged by the host's workspace after close.
#pragma once

#include <span>
#include <string_view>

#include "escape/scenario.h"

namespace airlock::escape::scenarios {

// What the plant probes write, and what the host looks for in the workspace after close.
inline constexpr std::string_view kPlantMarker = "airlock-canary-planted";

#if AIRLOCK_PROBE_SIDE

// Appends the marker to each target (paths under out/, the suite's one write-back path), in the
// view (relative) and under the workspace's path in arg(0); missing directories made, executable
// (a hook must be).
ProbeReport plant(std::span<const std::string_view> targets, const ProbeInput& in);

#else

// The plant scenarios' host half: the workspace's path as the probe's argument (on the host, with
// no view around it, that is where a plant lands), and after close, which target holds the marker.
class Plant : public Scenario {
 public:
  explicit Plant(std::span<const std::string_view> targets) : targets_(targets) {}
  Result<std::vector<std::string> > bait(Run& run) override;
  Judged judge(Run& run, const Observed& o) override;

 private:
  std::span<const std::string_view> targets_;
};

#endif

}  // namespace airlock::escape::scenarios
