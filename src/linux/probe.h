// The host probe: measures what this kernel and this caller can actually do, as plan::HostFacts.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plan/host_facts.h"

namespace airlock::linux {

// Measures every fact by trying it: a syscall, a short-lived forked child, or a directory made
// and removed at once. Never assumes from version numbers. Every false fact (and every cgroup
// controller missing from a list) gets a human reason in facts.reasons[fact name].
//
// Side-effect free: every child is reaped before this returns, mounts happen only inside
// children's private mount namespaces, and temp dirs (/tmp/<kProbeTempPrefix>XXXXXX) and probe
// cgroups (<kProbeTempPrefix><pid>-<n>) are removed before it returns; should one resist,
// facts.reasons["probe_cleanup"] names it. Safe to call from a multi-threaded process: children
// only make syscalls on data prepared before fork. The three probe children (seccomp, user
// namespace, overlayfs) run concurrently; the whole probe takes a few milliseconds (each child is
// killed after 2 s at worst). Call once per process and pass the value on.
plan::HostFacts probe_host();

// The same probe limited to the facts `scope` asks for (identity, Landlock and seccomp are
// always measured: they are cheap and every confining tier needs them). A fact left out stays
// false with the reason "not measured: ...", so a receipt never shows a guess as a measurement.
plan::HostFacts probe_host(const plan::FactNeeds& scope);

// The reasons key under which the probe notes a measurement that failed for a passing cause (a
// child that could not start, timed out or died): facts carrying it, or "probe_cleanup", are
// this moment's only and are never kept for later (exec/facts_cache.h).
inline constexpr std::string_view kProbeInconclusive = "probe_inconclusive";

// Name prefix of everything the probe creates and removes again (temp dirs, probe cgroups).
inline constexpr std::string_view kProbeTempPrefix = "airlock-probe-";

// The controllers the planner uses; the probe reports only these.
inline constexpr std::string_view kProbedControllers[] = {"cpu", "memory", "pids"};

// --- The parsing seams, pure and exposed for tests ---------------------------------------------

// One line of /proc/self/mountinfo (octal escapes such as \040 decoded).
struct MountInfoEntry {
  std::string root;         // field 4: the path inside the filesystem that is mounted here
  std::string mount_point;  // field 5
  std::string fstype;       // first field after " - "
  std::string super_options;
};
std::vector<MountInfoEntry> parse_mountinfo(std::string_view text);

// One line of /proc/self/cgroup: "hierarchy-id:controller,list:/path".
struct ProcCgroupEntry {
  std::string hierarchy_id;              // "0" for the v2 entry
  std::vector<std::string> controllers;  // empty for the v2 entry; may hold "name=systemd"
  std::string path;
};
std::vector<ProcCgroupEntry> parse_proc_cgroup(std::string_view text);

// Our own cgroup directory in the cgroup2 hierarchy, or nullopt (with why) when there is no
// "0::" entry, no cgroup2 mount, or our cgroup is not visible below any cgroup2 mount.
std::optional<std::string> cgroup_v2_dir(const std::vector<MountInfoEntry>& mounts,
                                         const std::vector<ProcCgroupEntry>& cgroups,
                                         std::string* why = nullptr);
// Our own cgroup directory in the v1 hierarchy that carries `controller`, or nullopt (with why).
std::optional<std::string> cgroup_v1_dir(std::string_view controller,
                                         const std::vector<MountInfoEntry>& mounts,
                                         const std::vector<ProcCgroupEntry>& cgroups,
                                         std::string* why = nullptr);

}  // namespace airlock::linux
