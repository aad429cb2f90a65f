// The escape suite: DESIGN.md's ten breaches and those added since, each run as a named probe inside an
// executor against canaries the suite plants, judged from the probe's report and from the host side.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/enum_names.h"
#include "base/error.h"
#include "base/json_util.h"
#include "plan/plan.h"
#include "policy/task_policy.h"

namespace airlock::broker {
class Session;
}

namespace airlock::escape {

// One enumerator per scenario, in the order of the table escape/scenarios.inc, where each row names
// its file (escape/scenarios/<name>.cpp: its bait, its probe, its judge). Their names are the
// probes' names.
enum class Breach {
#define AIRLOCK_SCENARIO(enumerator, name, policy) enumerator,
#include "escape/scenarios.inc"
};
std::span<const Breach> all_breaches();
// The door group (the rows whose policy is Door): run under the door policy; a tier that cannot
// have a door refuses them by name.
bool is_door_probe(Breach b);
size_t door_probe_count();
std::string_view to_string(Breach b);
std::optional<Breach> breach_from_string(std::string_view name);

// The probe program, an executable of its own installed beside airlock (src/escape/probe_program.h):
// `airlock-probe NAME --run MARKER [ARGS...]`. MARKER is the run's canary directory: every probe
// process carries it in its argv, so the suite can find and kill whatever a probe leaves behind.
// The suite copies it into every workspace as .probe/airlock-probe, so every tier carries it.
inline constexpr std::string_view kProbeProgram = "airlock-probe";
// Not a breach: the host process the suite starts for see_or_signal_host_process to find.
inline constexpr std::string_view kSleeperProbe = "host_sleeper";
// Not a breach: the first of two sessions in second_sandbox_files, run in the same executor. It
// writes its token into its view and sleeps until the suite stops it.
inline constexpr std::string_view kNeighbourProbe = "sandbox_neighbour";

// What the probes attempt. Each amount lies above the real tiers' limits (kTierLimits) and below
// the host baseline's (kHostBaselineLimits), so a probe that finishes has exceeded a real limit.
inline constexpr int kProbeMemoryMib = 512;
inline constexpr int kProbeCpuSeconds = 6;
// Past the wall limit (5 s) plus the SIGTERM-to-SIGKILL grace (2 s) of a real tier, with margin;
// the probe ignores SIGTERM, so only the SIGKILL that follows the grace stops it.
inline constexpr int kProbeSleepSeconds = 10;

// The door probes' names (answered by the suite's resolver seam and its DNS responder alike) and
// the header each of their requests carries the run marker in.
inline constexpr std::string_view kDoorAllowedHost = "allowed.test";      // 127.0.0.1, on the list
inline constexpr std::string_view kDoorForbiddenHost = "forbidden.test";  // 127.0.0.2, not on it
inline constexpr std::string_view kDoorRebindHost = "rebind.test";        // 127.0.0.1, then 127.0.0.2
inline constexpr std::string_view kDoorExfilDomain = "exfil.test";  // the DNS probe asks MARKER.exfil.test
inline constexpr std::string_view kRunHeader = "X-Airlock-Run";

struct SuiteLimits {
  int64_t memory_mb;
  int cpu_seconds;
  int max_processes;
  int command_timeout_seconds;
};
// Every real tier runs each probe under these limits.
inline constexpr SuiteLimits kTierLimits{256, 2, 32, 5};
// The host baseline runs with limits wide enough that every probe CAN finish: the baseline
// measures the probe (does it detect its breach when nothing stops it?), not the limits. With the
// real tiers' limits the host executor's own rlimits and wall clock would stop exceed_memory,
// exceed_time and exceed_cpu, and the baseline would prove nothing about those three probes.
inline constexpr SuiteLimits kHostBaselineLimits{4096, 60, 256, 30};

// The one JSON line a probe prints: {"probe", "breached", "evidence", "errno", ...extra fields}.
struct ProbeReport {
  std::string probe;
  bool breached = false;
  std::string evidence;
  int err = 0;
  Json extra = Json::object();  // probe-specific fields (daemon_pid, ...)
  Json to_json() const;
};
// The last line of `output` that is a report of probe `name`, if any.
std::optional<ProbeReport> parse_probe_report(std::string_view output, std::string_view name);

// What came of one breach in one executor. Inconclusive: the probe never started (so nothing was
// attempted and nothing can be called contained); unavailable: the session was refused. Refused:
// a door probe in a tier that cannot have a door, whose planner refused the door policy by name
// (the right answer there, but never counted as contained).
#define AIRLOCK_VERDICTS(X) \
  X(Breached, "breached") X(Contained, "contained") X(Unavailable, "unavailable") X(Inconclusive, "inconclusive") \
  X(Refused, "refused")
AIRLOCK_ENUM(Verdict, AIRLOCK_VERDICTS)

// The line a probe writes to stderr before it attempts anything: proof that it ran.
inline std::string probe_started_line(std::string_view name) {
  return std::string(kProbeProgram) + " " + std::string(name) + ": started";
}

// One breach run in one executor.
struct ScenarioResult {
  Breach breach = Breach::ReadHostFile;
  Verdict verdict = Verdict::Unavailable;
  std::optional<Error> error;     // why unavailable or inconclusive
  std::string evidence;           // one line, for people
  Json details = Json::object();  // probe report, host checks, outcome, write-back, session, receipts
  double seconds = 0;
  bool breached() const { return verdict == Verdict::Breached; }
};

#define AIRLOCK_TIER_STATUSES(X) X(Ran, "ran") X(Unavailable, "unavailable") X(Skipped, "skipped")
AIRLOCK_ENUM(TierStatus, AIRLOCK_TIER_STATUSES)

// One executor's column.
struct TierResult {
  policy::ExecutorKind executor = policy::ExecutorKind::Landlock;
  TierStatus status = TierStatus::Ran;
  bool expect_breach = false;    // the host baseline: every probe must breach; real tiers: none
  bool requested = false;        // named by --executor (SuiteOptions::executor)
  std::optional<Error> refusal;  // why unavailable or skipped
  std::vector<ScenarioResult> results;
  std::string canary_root;  // removed again when the tier is done
  bool cancelled = false;
  double seconds = 0;

  // What a result must come out as: breached on the host baseline; refused (by name) for a door
  // probe in a tier that cannot have a door; contained otherwise.
  Verdict expected(Breach b) const;
  size_t matching() const;  // results that came out as expected
  // Every breach ran and came out as expected (never true for a tier that did not run).
  bool matched() const;
  // "host: 22/22 breached — every probe detects its breach", "namespaces: 22/22 contained",
  // "landlock: 16/16 contained; door probes 6/6 refused — AIRLOCK_ISOLATION_POLICY_INVALID: ...", ...
  std::string verdict() const;
};

struct SuiteReport {
  plan::Profile profile = plan::Profile::Production;
  uid_t uid = 0;
  std::string kernel;
  std::vector<TierResult> tiers;
  bool cancelled = false;
  // At least one tier ran, every tier that ran matched its expectation, and the tier asked for
  // by name (if any) could run. A tier included only because no executor was named is listed when
  // unavailable (skipped when not part of this build) but does not fail the suite.
  bool ok() const;
  Json to_json() const;
  // The matrix (breach x executor), the evidence lines, then one verdict line per executor.
  std::string to_text() const;
};

struct SuiteOptions {
  std::string state_dir;  // sessions and their receipts live here, as for `airlock run`
  plan::Profile profile = plan::Profile::Production;
  // The one executor to test, or nullopt: every executor (host only in the development profile);
  // those not part of this build are then listed as skipped.
  std::optional<policy::ExecutorKind> executor;
  // The microVM tier's facts to test with (`airlock vm verify` passes the image and acceleration it
  // is verifying); nullopt: as exec::probe_microvm finds them.
  std::optional<plan::VmFacts> microvm;
  // The probe program, copied into every workspace the suite makes; empty: kProbeProgram beside
  // the running executable (/proc/self/exe's directory), where the build and an install put it.
  std::string probe_binary;
  // Called after each scenario (progress); may be empty.
  std::function<void(const TierResult&, const ScenarioResult&)> on_result;
};

// Runs the suite. Meant for a process of its own (the airlock CLI): while run() runs, the process
// is a child subreaper, so anything a probe leaves behind is re-parented to it and can be killed
// and reaped; every child that appears during the run, other than the suite's own, is killed.
class Suite {
 public:
  explicit Suite(SuiteOptions opts) : opts_(std::move(opts)) {}
  // A refusal here is an environment failure (no temp dir, no binary to copy); an executor that
  // cannot run is part of the report, never an error.
  Result<SuiteReport> run();
  // From any thread: stops the running probe and skips the rest. Canaries are still removed.
  void cancel();

 private:
  Result<TierResult> run_tier(policy::ExecutorKind executor, bool requested, const plan::HostFacts& facts);
  SuiteOptions opts_;
  std::string probe_binary_;
  std::string container_image_;  // the container tier's image (ensure_container_image), or ""  // opts_.probe_binary, or kProbeProgram beside this executable
  std::atomic<bool> cancelled_ = false;
  std::mutex mu_;
  broker::Session* current_ = nullptr;   // guarded by mu_
  std::vector<pid_t> foreign_children_;  // children this process had before run(): never touched
};

}  // namespace airlock::escape
