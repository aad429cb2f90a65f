// Planner tests: golden cases (policy + host facts + profile -> plan or refusal) and plain assertions.
//
// Golden cases live in tests/unit/golden/plan/:
//   policies/<name>.json   a task policy, layered over policy::builtin_default()
//   hosts/<name>.json      HostFacts as host_facts_from_json reads them ("nothing" and "everything"
//                          name the built-in plan::facts_nothing() / plan::facts_everything() instead)
//   expected/<case>.json   plan::to_json(plan), or {"refused": error.to_json()}
// The case table (kGoldenCases below) joins them. Expected files are compared as JSON values, so
// formatting and key order do not matter.
//
// To regenerate the expected files after an intended change to the planner, run
//   AIRLOCK_UPDATE_GOLDEN=1 ./build/tests/unit_tests --gtest_filter='*PlanGolden.*'
// The golden tests then rewrite tests/unit/golden/plan/expected/*.json (in the source tree) instead
// of comparing, and report themselves skipped. Review the diff before committing it.
//
// Policies use the absolute tool path /bin/sh (present on every Debian machine) so that
// policy_digest, which covers each tool's resolved argv[0], is the same on every machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "base/fs.h"
#include "exec/executor.h"
#include "exec/microvm_executor.h"
#include "plan/host_facts.h"
#include "plan/plan.h"
#include "policy/task_policy.h"

namespace airlock::plan {
namespace {

namespace fs = std::filesystem;
using policy::ExecutorKind;

const std::string kGoldenDir = AIRLOCK_SOURCE_DIR "/tests/unit/golden/plan";

bool update_golden() {
  const char* v = std::getenv("AIRLOCK_UPDATE_GOLDEN");
  return v != nullptr && std::string_view(v) == "1";
}

Result<policy::TaskPolicy> load_policy(const std::string& name) {
  const std::string path = kGoldenDir + "/policies/" + name + ".json";
  std::string text = TRY(read_file(path, Code::ConfigError));
  return policy::parse_layer_text(text, policy::builtin_default(), name);
}

Result<HostFacts> load_host(const std::string& name) {
  if (name == "nothing") return facts_nothing();
  if (name == "everything") return facts_everything();
  const std::string path = kGoldenDir + "/hosts/" + name + ".json";
  std::string text = TRY(read_file(path, Code::ConfigError));
  Json j = TRY(parse_json(text, Code::ConfigError, path));
  return host_facts_from_json(j);
}

// Plans for the tiers this build implements (exec's registry), as every caller does.
Result<ExecutionPlan> plan_here(const policy::TaskPolicy& p, const HostFacts& f, Profile profile) {
  return plan_execution(p, f, profile, exec::built_tiers());
}

// What a golden file records: the plan, or the refusal wrapped as {"refused": ...}.
Json outcome_json(const Result<ExecutionPlan>& r) {
  if (r) return to_json(*r);
  return Json{{"refused", r.error().to_json()}};
}

struct GoldenCase {
  const char* name;    // expected/<name>.json, and the test's name
  const char* policy;  // policies/<policy>.json
  const char* host;    // hosts/<host>.json, or "nothing" / "everything"
  Profile profile;
};

// So a failing case is reported by name rather than as bytes.
void PrintTo(const GoldenCase& c, std::ostream* os) {
  *os << c.name << " (policies/" << c.policy << ", host " << c.host << ", " << to_string(c.profile) << ")";
}

constexpr Profile kProd = Profile::Production;
constexpr Profile kDev = Profile::Development;

// clang-format off
const GoldenCase kGoldenCases[] = {
    // The selection table, one row at a time, on a host with every feature...
    {"auto_trusted_single_off_everything",       "trusted_single_off",          "everything",               kProd},
    {"auto_trusted_single_allowlist_everything", "trusted_single_allowlist",    "everything",               kProd},
    {"auto_trusted_multi_everything",            "trusted_multi",               "everything",               kProd},
    {"auto_untrusted_everything",                "untrusted",                   "everything",               kProd},
    // ...and on a host with none: every tier tried is refused, each with its reason.
    {"auto_trusted_single_off_nothing",          "trusted_single_off",          "nothing",                  kProd},
    {"auto_trusted_single_allowlist_nothing",    "trusted_single_allowlist",    "nothing",                  kProd},
    {"auto_trusted_multi_nothing",               "trusted_multi",               "nothing",                  kProd},
    {"auto_untrusted_nothing",                   "untrusted",                   "nothing",                  kProd},
    // auto never falls back to host, not even in the development profile.
    {"auto_trusted_single_off_nothing_dev",      "trusted_single_off",          "nothing",                  kDev},
    // Every explicit executor.
    {"executor_host_production",                 "executor_host",               "everything",               kProd},
    {"executor_host_development",                "executor_host",               "everything",               kDev},
    {"executor_host_development_nothing",        "executor_host",               "nothing",                  kDev},
    {"executor_landlock_everything",             "executor_landlock",           "everything",               kProd},
    {"executor_landlock_nothing",                "executor_landlock",           "nothing",                  kProd},
    {"executor_namespaces_everything",           "executor_namespaces",         "everything",               kProd},
    {"executor_microvm_everything",              "executor_microvm",            "everything",               kProd},
    {"executor_container_everything",            "executor_container",          "everything",               kProd},
    // An explicit executor may add isolation, never remove it.
    {"untrusted_executor_landlock",              "untrusted_executor_landlock", "everything",               kProd},
    {"allowlist_executor_landlock",              "allowlist_executor_landlock", "everything",               kProd},
    // Landlock below the floor: its own code when asked for by name, one reason among others for auto.
    {"executor_landlock_abi2",                   "executor_landlock",           "landlock_abi2_user",       kProd},
    {"auto_trusted_single_off_abi2",             "trusted_single_off",          "landlock_abi2_user",       kProd},
    {"auto_trusted_single_off_landlock_disabled","trusted_single_off",          "landlock_disabled",        kProd},
    {"auto_trusted_single_off_no_seccomp",       "trusted_single_off",          "no_seccomp",               kProd},
    // How the process count is limited depends on the uid and the writable pids cgroup.
    {"auto_root_without_pids_cgroup",            "trusted_single_off",          "root_without_pids_cgroup", kProd},
    {"executor_landlock_root_without_pids_cgroup","executor_landlock",          "root_without_pids_cgroup", kProd},
    {"auto_root_cgroup_v1_pids",                 "trusted_single_off",          "root_cgroup_v1_pids",      kProd},
    {"auto_root_cgroup_v2_pids",                 "trusted_single_off",          "root_cgroup_v2_pids",      kProd},
    {"auto_user_with_pids_cgroup",               "trusted_single_off",          "user_with_pids_cgroup",    kProd},
    // Landlock features follow the measured ABI.
    {"auto_landlock_abi3",                       "trusted_single_off",          "landlock_abi3_user",       kProd},
    {"auto_landlock_abi6",                       "trusted_single_off",          "landlock_abi6_user",       kProd},
    // An unprivileged user without a cgroup of its own is told the fix; with `setup delegate`'s, it has the tier.
    {"auto_user_cgroup_v1_undelegated",          "trusted_single_off",          "user_cgroup_v1_undelegated", kProd},
    {"auto_user_cgroup_v1_delegated",            "trusted_single_off",          "user_cgroup_v1_delegated", kProd},
    // Named relaxations.
    {"egress_allow_private",                     "egress_allow_private",        "everything",               kProd},
};
// clang-format on

class PlanGolden : public testing::TestWithParam<GoldenCase> {};

TEST_P(PlanGolden, MatchesExpectedOutput) {
  const GoldenCase& c = GetParam();
  auto policy = load_policy(c.policy);
  ASSERT_TRUE(policy.has_value()) << policy.error().message;
  auto facts = load_host(c.host);
  ASSERT_TRUE(facts.has_value()) << facts.error().message;

  const Json actual = outcome_json(plan_here(*policy, *facts, c.profile));
  const std::string path = kGoldenDir + "/expected/" + c.name + ".json";

  if (update_golden()) {
    auto w = write_file_atomic(path, actual.dump(2) + "\n");
    ASSERT_TRUE(w.has_value()) << w.error().message;
    GTEST_SKIP() << "AIRLOCK_UPDATE_GOLDEN=1: rewrote " << path;
  }

  auto text = read_file(path, Code::ConfigError);
  ASSERT_TRUE(text.has_value()) << text.error().message
                                << "\n(new case? create it with AIRLOCK_UPDATE_GOLDEN=1)";
  auto expected = parse_json(*text, Code::ConfigError, path);
  ASSERT_TRUE(expected.has_value()) << expected.error().message;
  EXPECT_TRUE(*expected == actual)
      << "golden mismatch for " << c.name << "\nJSON patch from expected to actual:\n"
      << Json::diff(*expected, actual).dump(2) << "\nactual:\n"
      << actual.dump(2) << "\nIf the change is intended, regenerate with AIRLOCK_UPDATE_GOLDEN=1.";
}

INSTANTIATE_TEST_SUITE_P(Cases, PlanGolden, testing::ValuesIn(kGoldenCases),
                         [](const testing::TestParamInfo<GoldenCase>& info) {
                           return std::string(info.param.name);
                         });

std::set<std::string> stems_in(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".json") out.insert(entry.path().stem().string());
  return out;
}

TEST(PlanGoldenFiles, EveryExpectedFileBelongsToACase) {
  std::set<std::string> names;
  for (const auto& c : kGoldenCases) EXPECT_TRUE(names.insert(c.name).second) << "duplicate case " << c.name;
  for (const auto& stem : stems_in(kGoldenDir + "/expected"))
    EXPECT_TRUE(names.count(stem)) << "expected/" << stem << ".json has no case in kGoldenCases";
}

TEST(PlanGoldenFiles, EveryPolicyAndHostFixtureIsUsed) {
  std::set<std::string> policies, hosts;
  for (const auto& c : kGoldenCases) {
    policies.insert(c.policy);
    hosts.insert(c.host);
  }
  for (const auto& stem : stems_in(kGoldenDir + "/policies"))
    EXPECT_TRUE(policies.count(stem)) << "policies/" << stem << ".json is used by no case";
  for (const auto& stem : stems_in(kGoldenDir + "/hosts"))
    EXPECT_TRUE(hosts.count(stem)) << "hosts/" << stem << ".json is used by no case";
}

TEST(PlanGoldenFiles, PolicyDigestDoesNotDependOnTheMachine) {
  // The digest covers each tool's resolved argv[0]; fixtures name /bin/sh so it never moves.
  for (const auto& stem : stems_in(kGoldenDir + "/policies")) {
    auto p = load_policy(stem);
    ASSERT_TRUE(p.has_value()) << stem << ": " << p.error().message;
    for (const auto& t : p->tools) EXPECT_EQ(t.argv.at(0), "/bin/sh") << stem << " tool " << t.name;
  }
}

// ---------------------------------------------------------------- plain assertions

policy::TaskPolicy policy_or_die(const std::string& name) {
  auto p = load_policy(name);
  EXPECT_TRUE(p.has_value()) << name << ": " << p.error().message;
  return p ? *p : policy::builtin_default();
}

HostFacts host_or_die(const std::string& name) {
  auto f = load_host(name);
  EXPECT_TRUE(f.has_value()) << name << ": " << f.error().message;
  return f ? *f : facts_nothing();
}

std::vector<std::string> considered_executors(const Json& considered) {
  std::vector<std::string> out;
  for (const auto& c : considered) out.push_back(c.at("executor").get<std::string>());
  return out;
}

TEST(PlanSelection, AutoTriesTheTiersOfTheSelectionTableInOrder) {
  struct Row {
    const char* policy;
    int level;
    std::vector<std::string> order;
  };
  const Row rows[] = {
      {"trusted_single_off", 1, {"namespaces", "landlock"}},
      {"trusted_single_allowlist", 2, {"namespaces"}},
      {"trusted_multi", 2, {"namespaces", "container"}},
      {"untrusted", 3, {"microvm"}},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.policy);
    // On a host with nothing, every tier is tried and refused, so facts.considered shows the order.
    auto r = plan_here(policy_or_die(row.policy), facts_nothing(), Profile::Production);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, Code::ExecutorUnavailable);
    EXPECT_EQ(r.error().facts.at("required_level"), row.level);
    const Json& considered = r.error().facts.at("considered");
    EXPECT_EQ(considered_executors(considered), row.order);
    for (const auto& c : considered) {
      EXPECT_FALSE(c.at("available").get<bool>()) << c.dump();
      EXPECT_FALSE(c.at("reason").get<std::string>().empty()) << c.dump();
    }
  }
}

TEST(PlanSelection, TrustedSingleTenantFallsBackToLandlockWhenNamespacesCannotRun) {
  HostFacts f = facts_everything();
  f.user_namespaces = false;
  f.overlayfs_in_userns = false;
  f.reasons["user_namespaces"] = "unshare(CLONE_NEWUSER): EPERM";
  auto r = plan_here(policy_or_die("trusted_single_off"), f, Profile::Production);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->executor(), ExecutorKind::Landlock);
  EXPECT_EQ(r->tier(), 1);
  EXPECT_EQ(r->required_level, 1);
  ASSERT_EQ(r->considered.size(), 2u);
  EXPECT_EQ(r->considered[0].executor, ExecutorKind::Namespaces);
  EXPECT_FALSE(r->considered[0].available);
  EXPECT_EQ(r->considered[1].executor, ExecutorKind::Landlock);
  EXPECT_TRUE(r->considered[1].available);
  EXPECT_TRUE(r->relaxations.empty());
  EXPECT_FALSE(r->host_network());
  const auto* ll = std::get_if<LandlockTierPlan>(&r->confinement);
  ASSERT_NE(ll, nullptr);
  EXPECT_TRUE(ll->seccomp.only_unix_sockets);
  EXPECT_EQ(r->policy_digest, policy::digest(policy_or_die("trusted_single_off")));
}

// Issue 26: what the Landlock tier shares with the host is denied there; the namespaces tier keeps
// SysV IPC and inotify (its own IPC and mount namespaces scope them). Both drop every capability and
// allow pid-targeted calls on the caller alone.
TEST(PlanSelection, LandlockTierDeniesWhatTheHostShares) {
  auto denied = [](const SeccompPlan& p, const std::string& name) {
    const auto& d = p.denied_syscalls;
    return std::find(d.begin(), d.end(), name) != d.end();
  };
  auto ll = plan_here(policy_or_die("executor_landlock"), facts_everything(), Profile::Production);
  auto ns = plan_here(policy_or_die("executor_namespaces"), facts_everything(), Profile::Production);
  ASSERT_TRUE(ll) << ll.error().message;
  ASSERT_TRUE(ns) << ns.error().message;
  ASSERT_TRUE(std::holds_alternative<LandlockTierPlan>(ll->confinement));
  ASSERT_TRUE(std::holds_alternative<NamespacesTierPlan>(ns->confinement));
  const SeccompPlan& ll_seccomp = std::get<LandlockTierPlan>(ll->confinement).seccomp;
  const SeccompPlan& ns_seccomp = std::get<NamespacesTierPlan>(ns->confinement).sandbox.seccomp;
  for (const auto* p : {&*ll, &*ns}) EXPECT_TRUE(p->drops_capabilities());
  for (const auto* sc : {&ll_seccomp, &ns_seccomp}) {
    const auto& self = sc->self_only_syscalls;
    for (const char* name : {"setpriority", "getpriority", "prlimit64", "sched_setaffinity", "ioprio_set"})
      EXPECT_NE(std::find(self.begin(), self.end(), name), self.end()) << name;
    EXPECT_TRUE(denied(*sc, "kcmp"));
    EXPECT_TRUE(denied(*sc, "pidfd_getfd"));
  }
  for (const char* name : {"shmget", "shmat", "msgrcv", "semop", "inotify_add_watch", "fanotify_init", "fanotify_mark"}) {
    EXPECT_TRUE(denied(ll_seccomp, name)) << name;
    EXPECT_FALSE(denied(ns_seccomp, name)) << name;
  }
  EXPECT_EQ(to_json(*ll)["capabilities"], "none");
}

TEST(PlanSelection, ExplicitTierIsNeverSwappedForAnother) {
  for (const char* name : {"executor_landlock", "executor_namespaces", "executor_microvm",
                           "executor_container"}) {
    SCOPED_TRACE(name);
    policy::TaskPolicy p = policy_or_die(name);
    auto r = plan_here(p, facts_nothing(), Profile::Production);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, Code::ExecutorUnavailable);
    EXPECT_EQ(considered_executors(r.error().facts.at("considered")),
              std::vector<std::string>{std::string(policy::to_string(p.executor))});
  }
}

TEST(PlanSelection, AutoNeverChoosesHostEvenInDevelopment) {
  auto r = plan_here(policy_or_die("trusted_single_off"), facts_nothing(), Profile::Development);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::ExecutorUnavailable);
  for (const auto& e : considered_executors(r.error().facts.at("considered"))) EXPECT_NE(e, "host");
}

TEST(PlanSelection, HostExecutorIsRefusedInProduction) {
  auto r = plan_here(policy_or_die("executor_host"), facts_everything(), Profile::Production);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::IsolationPolicyInvalid);
  EXPECT_EQ(r.error().facts.at("profile"), "production");
}

TEST(PlanSelection, HostExecutorInDevelopmentRunsUnconfinedAndRecordsTheRelaxation) {
  // Even a host with no confinement features at all: host needs none.
  for (const HostFacts& f : {facts_everything(), facts_nothing()}) {
    auto r = plan_here(policy_or_die("executor_host"), f, Profile::Development);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    EXPECT_EQ(r->executor(), ExecutorKind::Host);
    EXPECT_EQ(r->tier(), 0);
    EXPECT_EQ(r->profile, Profile::Development);
    EXPECT_EQ(r->relaxations, std::vector<std::string>{"executor: host"});
    EXPECT_TRUE(std::holds_alternative<HostTierPlan>(r->confinement));
    EXPECT_TRUE(r->host_network());
    EXPECT_FALSE(r->drops_capabilities());
  }
}

TEST(PlanSelection, MicrovmIsUnavailableUntilVerifiedAndSaysToRunVerify) {
  HostFacts f = facts_everything();
  f.microvm.verified = false;
  auto r = plan_here(policy_or_die("untrusted"), f, Profile::Production);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::ExecutorUnavailable);
  EXPECT_NE(r.error().message.find("airlock vm verify"), std::string::npos) << r.error().message;
}

TEST(PlanSelection, MicrovmWithoutAGuestImageSaysToBuildItBeforeVerifying) {
  HostFacts f = facts_everything();
  f.microvm = {};  // no image in the cache, and no probe's reason to repeat
  auto r = plan_here(policy_or_die("untrusted"), f, Profile::Production);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::ExecutorUnavailable);
  const std::string& m = r.error().message;
  auto build = m.find("airlock vm build"), verify = m.find("airlock vm verify");
  ASSERT_NE(build, std::string::npos) << m;
  EXPECT_TRUE(verify == std::string::npos || build < verify) << m;
}

TEST(PlanSelection, MicrovmNeedsTheNamespacesTierForQemu) {
  HostFacts f = facts_everything();
  f.user_namespaces = false;
  auto r = plan_here(policy_or_die("untrusted"), f, Profile::Production);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("namespaces tier"), std::string::npos) << r.error().message;
}

TEST(PlanSelection, MicrovmPlanRecordsTheGuestAndSizesQemusWall) {
  auto r = plan_here(policy_or_die("untrusted"), facts_everything(), Profile::Production);
  ASSERT_TRUE(r) << r.error().message;
  const auto* vm = std::get_if<MicrovmTierPlan>(&r->confinement);
  ASSERT_NE(vm, nullptr);
  EXPECT_EQ(r->executor(), ExecutorKind::Microvm);
  EXPECT_EQ(r->tier(), 3);
  EXPECT_EQ(vm->guest.kernel_sha256, facts_everything().microvm.kernel_sha256);
  EXPECT_EQ(vm->guest.acceleration, "kvm");
  EXPECT_EQ(vm->qemu.cgroup.memory_bytes, (vm->guest.memory_mb + kMicrovmOverheadMb) << 20);
  // QEMU opens /dev/kvm: its namespace has the node and its Landlock rules the right.
  const auto& dev = vm->qemu.namespaces.dev_nodes;
  EXPECT_NE(std::find(dev.begin(), dev.end(), "/dev/kvm"), dev.end());
  ASSERT_TRUE(vm->qemu.landlock.has_value());
  EXPECT_EQ(vm->qemu.landlock->fs_rules.back().path, "/dev/kvm");
  // The policy's process limit binds the command inside the guest; QEMU's own cgroup has its own.
  EXPECT_EQ(vm->guest.max_processes, 256u);
  EXPECT_EQ(r->limits.max_processes, vm->qemu.cgroup.pids_max);
  EXPECT_FALSE(r->host_network());
  auto argv = airlock::exec::qemu_argv(vm->guest, "/workspace", ".airlock-vm-1");
  auto has = [&](const std::string& a, const std::string& b) {
    for (size_t i = 0; i + 1 < argv.size(); ++i)
      if (argv[i] == a && argv[i + 1] == b) return true;
    return false;
  };
  EXPECT_TRUE(has("-nic", "none"));
  EXPECT_TRUE(has("-accel", "kvm"));
  EXPECT_TRUE(has("-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"));
  EXPECT_TRUE(has("-M", "microvm,acpi=off"));
  for (const auto& a : argv) EXPECT_EQ(a.find("netdev"), std::string::npos) << a;
}

TEST(PlanSelection, LandlockForUntrustedCodeIsAnInvalidIsolationPolicy) {
  auto r = plan_here(policy_or_die("untrusted_executor_landlock"), facts_everything(),
                          Profile::Production);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::IsolationPolicyInvalid);
  EXPECT_EQ(r.error().facts.at("executor_level"), 1);
  EXPECT_EQ(r.error().facts.at("required_level"), 3);
}

TEST(PlanSelection, LandlockWithCodeNetworkIsAnInvalidIsolationPolicy) {
  auto r = plan_here(policy_or_die("allowlist_executor_landlock"), facts_everything(),
                          Profile::Production);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::IsolationPolicyInvalid);
  EXPECT_EQ(r.error().facts.at("required_level"), 2);
}

TEST(PlanSelection, AllowlistPlansTheNamespacesTierWithADoorAndNothingElseOut) {
  auto r = plan_here(policy_or_die("trusted_single_allowlist"), facts_everything(), Profile::Production);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->executor(), ExecutorKind::Namespaces);
  EXPECT_FALSE(r->host_network());
  const auto* ns = std::get_if<NamespacesTierPlan>(&r->confinement);
  ASSERT_NE(ns, nullptr);
  ASSERT_TRUE(ns->door.has_value());
  EXPECT_EQ(ns->door->url(), "http://127.0.0.1:3128");
  ASSERT_EQ(ns->door->rules.size(), 1u);
  EXPECT_EQ(ns->door->rules[0].host, "pypi.org");
  auto env = ns->door->environment();
  for (const char* v : {"HTTP_PROXY=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128", "ALL_PROXY=http://127.0.0.1:3128"})
    EXPECT_NE(std::find(env.begin(), env.end(), v), env.end()) << v;
  // Behind the network namespace, Landlock lets TCP connect to the door's port only.
  ASSERT_TRUE(ns->sandbox.landlock.has_value());
  EXPECT_TRUE(ns->sandbox.landlock->restrict_tcp);
  EXPECT_EQ(ns->sandbox.landlock->tcp_connect_ports, std::vector<int>{3128});
  EXPECT_FALSE(ns->sandbox.seccomp.only_unix_sockets);
  // With the code network off there is no door and no TCP port at all.
  auto off = plan_here(policy_or_die("trusted_single_off"), facts_everything(), Profile::Production);
  ASSERT_TRUE(off.has_value());
  const auto* off_ns = std::get_if<NamespacesTierPlan>(&off->confinement);
  ASSERT_NE(off_ns, nullptr);
  EXPECT_FALSE(off_ns->door.has_value());
  ASSERT_TRUE(off_ns->sandbox.landlock.has_value());
  EXPECT_TRUE(off_ns->sandbox.landlock->tcp_connect_ports.empty());
}

TEST(PlanSelection, ExplicitLandlockBelowTheAbiFloorNamesTheMeasuredAbi) {
  auto r = plan_here(policy_or_die("executor_landlock"), host_or_die("landlock_abi2_user"),
                          Profile::Production);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::ConfinementBelowFloor);
  EXPECT_NE(r.error().message.find("ABI 2"), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().facts.at("landlock_abi"), 2);
  EXPECT_EQ(r.error().facts.at("floor"), kLandlockTierAbiFloor);
}

// The Landlock floor (issue 27): the landlock tier needs signal and abstract-socket scoping (ABI 6),
// since the command shares the host's pid space and no other wall scopes a kill(2) by pid. On ABI
// 3-5 it is refused by name, explicitly or under auto; the namespaces tier keeps Landlock from ABI 3
// as its second wall.
TEST(PlanLandlock, TheLandlockTierNeedsSignalScopingAbi6) {
  EXPECT_EQ(kLandlockTierAbiFloor, 6);
  auto explicit_abi3 = plan_here(policy_or_die("executor_landlock"), host_or_die("landlock_abi3_user"),
                                 Profile::Production);
  ASSERT_FALSE(explicit_abi3.has_value());
  EXPECT_EQ(explicit_abi3.error().code, Code::ConfinementBelowFloor);
  EXPECT_NE(explicit_abi3.error().message.find("signal and abstract-socket scoping"), std::string::npos)
      << explicit_abi3.error().message;
  auto auto_abi3 = plan_here(policy_or_die("trusted_single_off"), host_or_die("landlock_abi3_user"),
                             Profile::Production);
  ASSERT_FALSE(auto_abi3.has_value());
  EXPECT_EQ(auto_abi3.error().code, Code::ExecutorUnavailable);
  EXPECT_NE(auto_abi3.error().message.find("without signal scoping a command could signal its own supervisor"),
            std::string::npos)
      << auto_abi3.error().message;
  auto abi6 = plan_here(policy_or_die("executor_landlock"), host_or_die("landlock_abi6_user"), Profile::Production);
  ASSERT_TRUE(abi6.has_value()) << abi6.error().message;
  EXPECT_EQ(std::get<LandlockTierPlan>(abi6->confinement).landlock.abi_floor, 6);
  auto ns = plan_here(policy_or_die("executor_namespaces"), facts_everything(), Profile::Production);
  ASSERT_TRUE(ns.has_value()) << ns.error().message;
  EXPECT_EQ(std::get<NamespacesTierPlan>(ns->confinement).sandbox.landlock->abi_floor, kLandlockInnerAbiFloor);
}

TEST(PlanSelection, RootWithoutAWritablePidsCgroupCannotUseLandlock) {
  auto r = plan_here(policy_or_die("trusted_single_off"), host_or_die("root_without_pids_cgroup"),
                          Profile::Production);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::ExecutorUnavailable);
  const Json& considered = r.error().facts.at("considered");
  ASSERT_EQ(considered_executors(considered), (std::vector<std::string>{"namespaces", "landlock"}));
  EXPECT_NE(considered[1].at("reason").get<std::string>().find("RLIMIT_NPROC"), std::string::npos)
      << considered[1].dump();
}

TEST(PlanLimits, ProcessCountMechanismFollowsTheUidAndTheWritablePidsCgroup) {
  struct Row {
    const char* host;
    ProcessLimitMechanism expected;
  };
  // RLIMIT_NPROC does not bind uid 0, so root needs a pids cgroup; anyone else uses the rlimit.
  for (const Row& row : {Row{"root_cgroup_v1_pids", ProcessLimitMechanism::CgroupV1Pids},
                         Row{"root_cgroup_v2_pids", ProcessLimitMechanism::CgroupV2Pids},
                         Row{"user_with_pids_cgroup", ProcessLimitMechanism::RlimitNproc},
                         Row{"landlock_abi6_user", ProcessLimitMechanism::RlimitNproc}}) {
    SCOPED_TRACE(row.host);
    auto r = plan_here(policy_or_die("executor_landlock"), host_or_die(row.host), Profile::Production);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    EXPECT_EQ(r->limits.process_mechanism, row.expected);
    EXPECT_EQ(r->limits.max_processes, 256u);  // the default
  }
}

TEST(PlanLimits, ComeFromThePolicy) {
  auto r = plan_here(policy_or_die("trusted_single_off"), host_or_die("landlock_abi6_user"),
                          Profile::Production);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->limits.memory_bytes, 512ull * 1024 * 1024);
  EXPECT_EQ(r->limits.cpu_seconds, 60u);
  EXPECT_EQ(r->limits.max_processes, 64u);
  EXPECT_EQ(r->limits.wall_timeout_ms, 90000u);
}

TEST(PlanLandlock, FeaturesFollowTheMeasuredAbi) {
  for (const char* host : {"landlock_abi6_user", "everything"}) {
    SCOPED_TRACE(host);
    auto r = plan_here(policy_or_die("executor_landlock"), host_or_die(host), Profile::Production);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    const auto* ll = std::get_if<LandlockTierPlan>(&r->confinement);
    ASSERT_NE(ll, nullptr);
    EXPECT_GE(ll->landlock.abi_measured, 6);
    EXPECT_TRUE(ll->landlock.restrict_tcp);  // code network is off
    EXPECT_TRUE(ll->landlock.restrict_ioctl_dev);
    EXPECT_TRUE(ll->landlock.scope_abstract_unix);
    EXPECT_TRUE(ll->landlock.scope_signal);
  }
}

TEST(PlanLandlock, WorkspaceRulesGiveWriteOnlyToWriteBackPathsAndScratch) {
  auto r = plan_here(policy_or_die("trusted_single_off"), facts_everything(), Profile::Production);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  const auto* ns = std::get_if<NamespacesTierPlan>(&r->confinement);
  ASSERT_NE(ns, nullptr);
  ASSERT_TRUE(ns->sandbox.landlock.has_value());
  const LandlockPlan& landlock = *ns->sandbox.landlock;
  std::vector<std::string> writable;
  for (const auto& rule : landlock.fs_rules)
    if (rule.access == Access::Write)
      writable.push_back(fmt::format("{}:{}", to_string(rule.anchor), rule.path));
  EXPECT_EQ(writable, (std::vector<std::string>{"view:src", "view:reports", "scratch:."}));
  // The policy's extra read-only host path is readable and executable, never writable.
  auto extra = std::find_if(landlock.fs_rules.begin(), landlock.fs_rules.end(),
                            [](const FsRule& f) { return f.path == "/opt/toolchain"; });
  ASSERT_NE(extra, landlock.fs_rules.end());
  EXPECT_EQ(extra->anchor, Anchor::Host);
  EXPECT_EQ(extra->access, Access::Exec);
  EXPECT_EQ(r->view_paths, (std::vector<std::string>{"src", "tests", "docs", "reports"}));
  EXPECT_EQ(r->write_back_paths, (std::vector<std::string>{"src", "reports"}));
}

TEST(PlanRelaxations, AllowPrivateEgressIsRecordedByName) {
  auto r = plan_here(policy_or_die("egress_allow_private"), facts_everything(), Profile::Production);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->relaxations, std::vector<std::string>{"egress: allow_private"});

  auto plain = plan_here(policy_or_die("trusted_single_off"), facts_everything(), Profile::Production);
  ASSERT_TRUE(plain.has_value()) << plain.error().message;
  EXPECT_TRUE(plain->relaxations.empty());
}

TEST(PlanPurity, SameInputsGiveIdenticalJson) {
  for (const auto& c : kGoldenCases) {
    SCOPED_TRACE(c.name);
    auto policy = load_policy(c.policy);
    ASSERT_TRUE(policy.has_value()) << policy.error().message;
    auto facts = load_host(c.host);
    ASSERT_TRUE(facts.has_value()) << facts.error().message;
    const std::string first = canonical_json(outcome_json(plan_here(*policy, *facts, c.profile)));
    const std::string second = canonical_json(outcome_json(plan_here(*policy, *facts, c.profile)));
    EXPECT_EQ(first, second);
  }
}

TEST(PlanPurity, PlanningLeavesItsInputsUnchanged) {
  const policy::TaskPolicy p = policy_or_die("trusted_single_off");
  const HostFacts f = host_or_die("root_cgroup_v1_pids");
  const std::string p_before = canonical_json(policy::to_json(p));
  const std::string f_before = canonical_json(to_json(f));
  (void)plan_here(p, f, Profile::Production);
  EXPECT_EQ(canonical_json(policy::to_json(p)), p_before);
  EXPECT_EQ(canonical_json(to_json(f)), f_before);
}

TEST(PlanFactNeeds, LandlockPoliciesNeedNoNamespaceOrKvmProbe) {
  // auto for a trusted single-tenant task tries namespaces then landlock; only what this build
  // can apply is probed, and landlock needs the cgroup facts (the pids cgroup for root).
  FactNeeds n = fact_needs(policy_or_die("trusted_single_off"), exec::built_tiers());
  EXPECT_TRUE(n.cgroups);
  EXPECT_FALSE(n.kvm);
}

TEST(PlanFactNeeds, TheFactsPlanningReadsAreTheOnesNeeded) {
  // Planning with only the needed facts gives the same plan as planning with all of them.
  for (const auto& c : kGoldenCases) {
    SCOPED_TRACE(c.name);
    auto policy = load_policy(c.policy);
    ASSERT_TRUE(policy.has_value());
    auto facts = load_host(c.host);
    ASSERT_TRUE(facts.has_value());
    FactNeeds n = fact_needs(*policy, exec::built_tiers());
    HostFacts partial = *facts;
    if (!n.user_namespaces) partial.user_namespaces = false;
    if (!n.overlayfs) partial.overlayfs_in_userns = false;
    if (!n.cgroups) partial.cgroup_v1_writable.clear(), partial.cgroup_v2_controllers.clear();
    if (!n.kvm) partial.kvm_usable = false;
    auto a = plan_here(*policy, *facts, c.profile);
    auto b = plan_here(*policy, partial, c.profile);
    ASSERT_EQ(a.has_value(), b.has_value());
    if (a) EXPECT_EQ(a->executor(), b->executor());
    else EXPECT_EQ(a.error().code, b.error().code);
  }
}

TEST(PlanProtected, ThePlanCarriesProtectedPathsAndNamesEachRelaxation) {
  auto pol = policy::parse_layer_text(
      R"({"schema_version":"airlock.task_policy.v1","writable_protected_paths":[".vscode", ".idea"]})",
      policy::builtin_default(), "test");
  ASSERT_TRUE(pol.has_value()) << pol.error().message;
  auto r = plan_here(*pol, facts_everything(), Profile::Production);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->relaxations,
            (std::vector<std::string>{"writable_protected_paths: .vscode", "writable_protected_paths: .idea"}));
  EXPECT_EQ(r->protected_paths.size(), policy::default_protected_paths().size() - 2);
  EXPECT_TRUE(r->protected_first_wall);
  EXPECT_EQ(r->denied_names, pol->denied_names);
  auto d = plan_here(policy::builtin_default(), facts_everything(), Profile::Production);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->protected_paths, policy::default_protected_paths());
  EXPECT_TRUE(d->relaxations.empty());
}

// Issue 25: the tiers this build implements are exec's registry, and only those are planned.
TEST(PlanTiers, TheBuiltTiersAreTheExecutorRegistrys) {
  std::vector<ExecutorKind> built(exec::built_tiers().begin(), exec::built_tiers().end());
  EXPECT_EQ(built, (std::vector<ExecutorKind>{ExecutorKind::Host, ExecutorKind::Landlock, ExecutorKind::Namespaces,
                                              ExecutorKind::Container, ExecutorKind::Microvm}));
  // Each one plans, and its plan is of its own tier.
  for (ExecutorKind e : built) {
    SCOPED_TRACE(policy::to_string(e));
    policy::TaskPolicy p = policy_or_die(e == ExecutorKind::Host ? "executor_host"
                                         : e == ExecutorKind::Landlock ? "executor_landlock"
                                         : e == ExecutorKind::Namespaces ? "executor_namespaces"
                                         : e == ExecutorKind::Container ? "executor_container"
                                                                         : "executor_microvm");
    HostFacts f = facts_everything();
    if (e == ExecutorKind::Container) {
      p.image = "localhost/t@sha256:" + std::string(64, 'a');
      f.container = {"/usr/bin/podman", "4.3.1", "runc", false, {{*p.image, "sha256:" + std::string(64, 'b'), true, "", 1}}};
    }
    auto r = plan_here(p, f, e == ExecutorKind::Host ? Profile::Development : Profile::Production);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    EXPECT_EQ(r->executor(), e);
    EXPECT_EQ(r->tier(), isolation_level(e));
  }
}

// The namespaces sandbox's own /tmp, /proc and /dev hide the host's: a read-only path beneath one
// is refused by name at plan time (an agent installed under /tmp used to vanish inside), while the
// Landlock tier, which shows the host's own /tmp, plans it.
TEST(PlanTiers, AReadOnlyPathTheNamespacesSandboxWouldHideIsRefusedByName) {
  for (const char* hidden : {"/tmp/agent", "/proc/sys", "/dev/shm/x", "/tmp"}) {
    SCOPED_TRACE(hidden);
    policy::TaskPolicy p = policy_or_die("executor_namespaces");
    p.read_only_paths = {"/opt/tools", hidden};
    auto r = plan_here(p, facts_everything(), Profile::Production);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, Code::IsolationPolicyInvalid);
    EXPECT_EQ(r.error().facts.at("read_only_path"), hidden);
    EXPECT_NE(r.error().message.find("install it elsewhere"), std::string::npos) << r.error().message;
  }
  policy::TaskPolicy ok = policy_or_die("executor_namespaces");
  ok.read_only_paths = {"/opt/tools", "/var/tmp/agent", "/tmpfoo"};
  EXPECT_TRUE(plan_here(ok, facts_everything(), Profile::Production).has_value());
  policy::TaskPolicy ll = policy_or_die("executor_landlock");
  ll.read_only_paths = {"/tmp/agent"};
  EXPECT_TRUE(plan_here(ll, facts_everything(), Profile::Production).has_value());
}

// The container tier: only an image the probe checked here, by that exact digest; every other
// case a refusal that names what is missing.
TEST(PlanTiers, TheContainerTierRunsOnlyAnImageCheckedHereByItsDigest) {
  const std::string ref = "localhost/tools@sha256:" + std::string(64, 'a');
  const std::string other = "localhost/tools@sha256:" + std::string(64, 'b');
  auto pol = [&](std::optional<std::string> image) {
    policy::TaskPolicy p = policy_or_die("executor_container");
    p.image = image;
    return p;
  };
  HostFacts f = facts_everything();
  // No engine: named, with the probe's reason.
  f.reasons["container"] = "/usr/bin/podman is not installed";
  auto r = plan_here(pol(ref), f, Profile::Production);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("no container engine ran a container here: /usr/bin/podman is not installed"),
            std::string::npos)
      << r.error().message;
  f.container = {"/usr/bin/podman", "4.3.1", "runc", false, {}};
  // No image in the policy.
  r = plan_here(pol(std::nullopt), f, Profile::Production);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("the policy names no image"), std::string::npos) << r.error().message;
  // A row for another digest of the same name does not qualify; the refusal names what was checked.
  f.container.images = {{other, "sha256:" + std::string(64, 'c'), true, "checked", 1}};
  r = plan_here(pol(ref), f, Profile::Production);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::ExecutorUnavailable);
  EXPECT_NE(r.error().message.find("has no fresh, successful check on this host"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find(other), std::string::npos) << r.error().message;
  // A failed check is named with its reason.
  f.container.images.push_back({ref, "sha256:" + std::string(64, 'd'), false, "capabilities remain", 1});
  r = plan_here(pol(ref), f, Profile::Production);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("did not pass the container check here: capabilities remain"), std::string::npos)
      << r.error().message;
  // A passed check: the plan runs that content id, with the sandbox's limits and seccomp.
  f.container.images.back().ok = true;
  r = plan_here(pol(ref), f, Profile::Production);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  const auto* t = std::get_if<ContainerTierPlan>(&r->confinement);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->container.image, ref);
  EXPECT_EQ(t->container.image_id, "sha256:" + std::string(64, 'd'));
  EXPECT_EQ(t->cgroup.memory_bytes, 1024u * 1024 * 1024);
  EXPECT_TRUE(t->seccomp.deny_namespace_clone);
  Json j = to_json(*r);
  EXPECT_EQ(j["executor"], "container");
  EXPECT_EQ(j["container"]["network"], "none");
  EXPECT_EQ(j["capabilities"], "none");
  // Network for code needs a door, which the container tier has not.
  policy::TaskPolicy net = pol(ref);
  net.code_network.mode = policy::NetworkMode::Allowlist;
  EXPECT_FALSE(plan_here(net, f, Profile::Production).has_value());
  // What it needs probed.
  FactNeeds n = fact_needs(pol(ref), exec::built_tiers());
  EXPECT_TRUE(n.container && n.cgroups);
}

TEST(PlanTiers, ATierNoExecutorImplementsIsRefusedByNameAndNeedsNoFacts) {
  // A build whose registry lacks the container executor refuses it by name and probes nothing for it.
  const ExecutorKind no_container[] = {ExecutorKind::Host, ExecutorKind::Landlock, ExecutorKind::Namespaces,
                                       ExecutorKind::Microvm};
  Candidate c = assess(ExecutorKind::Container, facts_everything(), Profile::Production, no_container);
  EXPECT_FALSE(c.available);
  EXPECT_EQ(c.reason, "no executor implements the container tier in this build");
  auto r = plan_execution(policy_or_die("executor_container"), facts_everything(), Profile::Production, no_container);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::ExecutorUnavailable);
  EXPECT_NE(r.error().message.find("no executor implements the container tier in this build"), std::string::npos)
      << r.error().message;
  FactNeeds n = fact_needs(policy_or_die("executor_container"), no_container);
  EXPECT_FALSE(n.user_namespaces || n.overlayfs || n.cgroups || n.kvm || n.container);
  // The list is what decides: a build without the microvm executor refuses it the same way, and
  // probes nothing for it.
  const ExecutorKind no_vm[] = {ExecutorKind::Host, ExecutorKind::Landlock, ExecutorKind::Namespaces};
  auto vm = plan_execution(policy_or_die("untrusted"), facts_everything(), Profile::Production, no_vm);
  ASSERT_FALSE(vm.has_value());
  EXPECT_NE(vm.error().message.find("no executor implements the microvm tier in this build"), std::string::npos)
      << vm.error().message;
  EXPECT_FALSE(fact_needs(policy_or_die("untrusted"), no_vm).kvm);
}

TEST(PlanTiers, EachTierPlanNamesItsTier) {
  EXPECT_EQ(executor_of(HostTierPlan{}), ExecutorKind::Host);
  EXPECT_EQ(executor_of(LandlockTierPlan{}), ExecutorKind::Landlock);
  EXPECT_EQ(executor_of(NamespacesTierPlan{}), ExecutorKind::Namespaces);
  EXPECT_EQ(executor_of(MicrovmTierPlan{}), ExecutorKind::Microvm);
  // A plan nobody planned is an empty Landlock plan, never the host tier's nothing.
  ExecutionPlan unplanned;
  EXPECT_EQ(unplanned.executor(), ExecutorKind::Landlock);
  EXPECT_TRUE(unplanned.drops_capabilities());
  EXPECT_FALSE(unplanned.host_network());
}

}  // namespace
}  // namespace airlock::plan
