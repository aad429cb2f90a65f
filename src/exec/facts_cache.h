// The per-boot cache of the host probe. Probing forks three children and makes and removes a
// cgroup per controller: a few milliseconds that every short `airlock run` would pay again,
// though the answers only change when the host or the caller does. HostProbe keeps them in the
// state directory (kFactsCacheFile) under a key of everything they depend on, and measures
// again when any part of the key differs.
//
// A cached fact that has gone stale fails closed: every confining step is re-checked when it is
// applied (the clone into new namespaces, the cgroup made for the sandbox, the Landlock ruleset,
// the seccomp filter), so a capability that went away fails the run by name, and `airlock
// doctor` measures afresh and rewrites the cache.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/json_util.h"
#include "plan/host_facts.h"

namespace airlock::exec {

inline constexpr std::string_view kFactsCacheFile = "host-facts.json";

// What the probe's answers depend on, read without forking: the boot (boot id, kernel release),
// this airlock (the build id of the running program), the caller (uid, gid, groups, its own
// cgroups and the cgroup mounts it sees, its seccomp mode, no_new_privs and capabilities, its LSM
// label, its user, mount and cgroup namespaces), the settings that allow user namespaces, the
// delegated cgroups `airlock setup delegate` makes for this uid, and /dev/kvm's owner and mode.
// nullopt when the running program carries no build id or the boot id cannot be read: then
// nothing is cached. A probe that was inconclusive (linux::kProbeInconclusive) is never kept.
std::optional<Json> facts_cache_key();

struct CachedFacts {
  plan::FactNeeds measured;  // which of the costlier facts the cached probe measured
  plan::HostFacts facts;
  int64_t measured_at = 0;   // unix seconds; set by store_cached_facts
};

// The reasons key under which facts served from the cache say so, and when they were measured:
// a receipt or a plan never shows a kept fact as one measured for it.
inline constexpr std::string_view kFactsCachedReason = "facts_cached";

// The cache in `state_dir` when it holds `key`, is ours (owned by this euid, not writable by
// anyone else) and reads back whole; nullopt otherwise (a torn or foreign file is a miss).
std::optional<CachedFacts> load_cached_facts(const std::string& state_dir, const Json& key);

// Replaces the cache atomically (best effort: a state directory we cannot write keeps no cache).
void store_cached_facts(const std::string& state_dir, const Json& key, const CachedFacts& entry);

// True when `have` measured every fact `want` asks for.
bool covers(const plan::FactNeeds& have, const plan::FactNeeds& want);

}  // namespace airlock::exec
