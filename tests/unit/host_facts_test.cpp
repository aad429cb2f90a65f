// HostFacts: JSON round trip, strict refusal with the JSON path, and the two synthetic hosts.
#include "plan/host_facts.h"

#include <gtest/gtest.h>

namespace airlock::plan {
namespace {

HostFacts sample() {
  HostFacts f;
  f.kernel_release = "6.1.0-18-amd64";
  f.running_as_root = true;
  f.landlock_abi = 3;
  f.seccomp_filter = true;
  f.no_new_privs = true;
  f.user_namespaces = false;
  f.overlayfs_in_userns = false;
  f.cgroup_v2_controllers = {"pids"};
  f.cgroup_v1_writable = {"memory", "cpu"};
  f.kvm_usable = false;
  f.reasons = {{"user_namespaces", "unshare(CLONE_NEWUSER): EPERM"},
               {"kvm_usable", "/dev/kvm does not exist"}};
  return f;
}

void expect_same(const HostFacts& a, const HostFacts& b) {
  EXPECT_EQ(a.kernel_release, b.kernel_release);
  EXPECT_EQ(a.running_as_root, b.running_as_root);
  EXPECT_EQ(a.landlock_abi, b.landlock_abi);
  EXPECT_EQ(a.seccomp_filter, b.seccomp_filter);
  EXPECT_EQ(a.no_new_privs, b.no_new_privs);
  EXPECT_EQ(a.user_namespaces, b.user_namespaces);
  EXPECT_EQ(a.overlayfs_in_userns, b.overlayfs_in_userns);
  EXPECT_EQ(a.cgroup_v2_controllers, b.cgroup_v2_controllers);
  EXPECT_EQ(a.cgroup_v1_writable, b.cgroup_v1_writable);
  EXPECT_EQ(a.cgroup_v1_base, b.cgroup_v1_base);
  EXPECT_EQ(a.cgroup_fix, b.cgroup_fix);
  EXPECT_EQ(a.kvm_usable, b.kvm_usable);
  EXPECT_EQ(a.reasons, b.reasons);
}

// The refusal's code and facts.path, or a test failure if the input was accepted.
void expect_refused_at(const Json& j, const std::string& path) {
  auto r = host_facts_from_json(j);
  ASSERT_FALSE(r.has_value()) << j.dump();
  EXPECT_EQ(r.error().code, Code::OptionInvalid);  // the --facts document is the operator's argument
  EXPECT_EQ(r.error().facts.value("path", ""), path) << r.error().message;
}

TEST(HostFactsJson, RoundTripKeepsEveryField) {
  const HostFacts f = sample();
  auto back = host_facts_from_json(to_json(f));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  expect_same(*back, f);
  EXPECT_EQ(canonical_json(to_json(*back)), canonical_json(to_json(f)));
}

TEST(HostFactsJson, TheCgroupBaseAndFixRoundTripAndAreOmittedWhenEmpty) {
  HostFacts f = sample();
  f.cgroup_v1_base = "/sys/fs/cgroup/<controller>/airlock.delegate/1000";
  f.cgroup_fix = "sudo airlock setup delegate alice";
  auto back = host_facts_from_json(to_json(f));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  expect_same(*back, f);
  EXPECT_FALSE(to_json(sample()).contains("cgroup_v1_base"));
  EXPECT_FALSE(to_json(sample()).contains("cgroup_fix"));
}

TEST(HostFactsJson, RoundTripOfTheSyntheticHosts) {
  for (const HostFacts& f : {facts_nothing(), facts_everything()}) {
    auto back = host_facts_from_json(to_json(f));
    ASSERT_TRUE(back.has_value()) << back.error().message;
    expect_same(*back, f);
  }
}

TEST(HostFactsJson, KeysAreTheMemberNames) {
  const Json j = to_json(sample());
  for (const char* key : {"kernel_release", "running_as_root", "landlock_abi", "seccomp_filter",
                          "no_new_privs", "user_namespaces", "overlayfs_in_userns", "cgroup_v2_controllers",
                          "cgroup_v1_writable", "kvm_usable", "microvm", "reasons"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j.size(), 12u);
  EXPECT_EQ(j["landlock_abi"], 3);
  EXPECT_EQ(j["cgroup_v1_writable"], Json::array({"memory", "cpu"}));
  EXPECT_EQ(j["reasons"]["kvm_usable"], "/dev/kvm does not exist");
}

TEST(HostFactsJson, MicrovmFactsRoundTripAndRefuseWhatTheyCannotBe) {
  HostFacts f = facts_everything();
  auto back = host_facts_from_json(to_json(f));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->microvm.kernel_sha256, f.microvm.kernel_sha256);
  EXPECT_EQ(back->microvm.acceleration, "kvm");
  EXPECT_TRUE(back->microvm.verified);
  EXPECT_EQ(back->microvm.tsc_khz, f.microvm.tsc_khz);
  Json j = to_json(f);
  j["microvm"]["acceleration"] = "hvf";
  expect_refused_at(j, "$.microvm.acceleration");
  j = to_json(f);
  j["microvm"]["verifed"] = true;
  expect_refused_at(j, "$.microvm.verifed");
}

TEST(HostFactsJson, RefusesAnUnknownKeyWithItsPath) {
  Json j = to_json(sample());
  j["landlock_abl"] = 3;
  expect_refused_at(j, "$.landlock_abl");
}

TEST(HostFactsJson, RefusesWrongTypesWithTheirPath) {
  Json j = to_json(sample());
  j["seccomp_filter"] = "yes";
  expect_refused_at(j, "$.seccomp_filter");

  j = to_json(sample());
  j["landlock_abi"] = 3.0;
  expect_refused_at(j, "$.landlock_abi");

  j = to_json(sample());
  j["landlock_abi"] = -1;
  expect_refused_at(j, "$.landlock_abi");

  j = to_json(sample());
  j["cgroup_v2_controllers"] = Json::array({"pids", 7});
  expect_refused_at(j, "$.cgroup_v2_controllers[1]");

  j = to_json(sample());
  j["cgroup_v1_writable"] = "memory";
  expect_refused_at(j, "$.cgroup_v1_writable");

  j = to_json(sample());
  j["reasons"]["kvm_usable"] = false;
  expect_refused_at(j, "$.reasons.kvm_usable");

  j = to_json(sample());
  j["kernel_release"] = nullptr;
  expect_refused_at(j, "$.kernel_release");

  expect_refused_at(Json::array(), "$");
}

TEST(HostFactsJson, AMissingKeyReadsAsAbsent) {
  auto f = host_facts_from_json(Json{{"kernel_release", "x"}, {"landlock_abi", 4}});
  ASSERT_TRUE(f.has_value()) << f.error().message;
  EXPECT_EQ(f->landlock_abi, 4);
  EXPECT_FALSE(f->seccomp_filter);
  EXPECT_FALSE(f->kvm_usable);
  EXPECT_TRUE(f->cgroup_v2_controllers.empty());
}

TEST(HostFacts, HasCgroupControllerLooksAtBothHierarchies) {
  HostFacts f;
  f.cgroup_v2_controllers = {"pids"};
  f.cgroup_v1_writable = {"memory"};
  EXPECT_TRUE(f.has_cgroup_controller("pids"));
  EXPECT_TRUE(f.has_cgroup_controller("memory"));
  EXPECT_FALSE(f.has_cgroup_controller("cpu"));
  EXPECT_FALSE(f.has_cgroup_controller("mem"));
}

TEST(HostFacts, NothingHasNoFeatureAndSaysWhyForEach) {
  const HostFacts f = facts_nothing();
  EXPECT_EQ(f.kernel_release, "unknown");
  EXPECT_FALSE(f.running_as_root);
  EXPECT_EQ(f.landlock_abi, 0);
  EXPECT_FALSE(f.seccomp_filter);
  EXPECT_FALSE(f.no_new_privs);
  EXPECT_FALSE(f.user_namespaces);
  EXPECT_FALSE(f.overlayfs_in_userns);
  EXPECT_TRUE(f.cgroup_v2_controllers.empty());
  EXPECT_TRUE(f.cgroup_v1_writable.empty());
  EXPECT_FALSE(f.kvm_usable);
  for (const char* fact :
       {"landlock_abi", "seccomp_filter", "no_new_privs", "user_namespaces", "overlayfs_in_userns",
        "cgroup_v2_controllers", "cgroup_v1_writable", "kvm_usable"}) {
    ASSERT_TRUE(f.reasons.contains(fact)) << fact;
    EXPECT_EQ(f.reasons.at(fact), "absent (synthetic host)") << fact;
  }
  for (const char* c : {"cpu", "memory", "pids"}) EXPECT_FALSE(f.has_cgroup_controller(c)) << c;
}

TEST(HostFacts, EverythingHasEveryFeature) {
  const HostFacts f = facts_everything();
  EXPECT_EQ(f.kernel_release, "synthetic");
  EXPECT_FALSE(f.running_as_root);
  EXPECT_EQ(f.landlock_abi, kLandlockAbiKnown);
  EXPECT_TRUE(f.seccomp_filter);
  EXPECT_TRUE(f.no_new_privs);
  EXPECT_TRUE(f.user_namespaces);
  EXPECT_TRUE(f.overlayfs_in_userns);
  EXPECT_EQ(f.cgroup_v2_controllers, (std::vector<std::string>{"cpu", "memory", "pids"}));
  EXPECT_TRUE(f.cgroup_v1_writable.empty());
  EXPECT_TRUE(f.kvm_usable);
  EXPECT_TRUE(f.reasons.empty());
  for (const char* c : {"cpu", "memory", "pids"}) EXPECT_TRUE(f.has_cgroup_controller(c)) << c;
}

}  // namespace
}  // namespace airlock::plan
