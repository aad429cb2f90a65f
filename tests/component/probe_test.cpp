// The host probe on the real host: facts agree with independent measurements, and it leaves nothing behind.
#include "linux/probe.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>

#include "base/fs.h"
#include "exec/facts_cache.h"
#include "exec/planner.h"
#include "../unit/scratch_dir.h"

namespace airlock::linux {
namespace {

using plan::HostFacts;

const HostFacts& facts() {
  static const HostFacts f = probe_host();
  return f;
}

std::string reason_for(const HostFacts& f, const std::string& fact) {
  auto it = f.reasons.find(fact);
  return it == f.reasons.end() ? "(no reason recorded)" : it->second;
}

// The names in `dir` that start with the probe's prefix.
std::set<std::string> probe_entries(const std::string& dir) {
  std::set<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d))
    // Only this process's: other tests may probe at the same time (ctest -j).
    if (std::string_view(e->d_name).starts_with(std::string(kProbeTempPrefix) + std::to_string(::getpid()) + "-"))
      out.insert(e->d_name);
  ::closedir(d);
  return out;
}

// Every directory the probe may make a child in: /tmp and our cgroups in every hierarchy.
std::vector<std::string> probe_dirs() {
  std::vector<std::string> dirs = {"/tmp"};
  auto mi = read_file("/proc/self/mountinfo");
  auto cg = read_file("/proc/self/cgroup");
  if (!mi || !cg) return dirs;
  auto mounts = parse_mountinfo(*mi);
  auto cgroups = parse_proc_cgroup(*cg);
  if (auto d = cgroup_v2_dir(mounts, cgroups)) dirs.push_back(*d);
  for (std::string_view c : kProbedControllers)
    if (auto d = cgroup_v1_dir(c, mounts, cgroups)) dirs.push_back(*d);
  return dirs;
}

bool require_all_tiers() {
  const char* v = std::getenv("AIRLOCK_REQUIRE_ALL_TIERS");
  return v && std::string_view(v) == "1";
}

// A missing feature is a named skip, or a failure when AIRLOCK_REQUIRE_ALL_TIERS=1.
#define REQUIRE_FEATURE(ok, feature, why)                                                                \
  do {                                                                                                   \
    if (!(ok)) {                                                                                         \
      if (require_all_tiers()) FAIL() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but " << feature << ": " << (why); \
      GTEST_SKIP() << "host lacks " << feature << ": " << (why);                                         \
    }                                                                                                    \
  } while (0)

TEST(Probe, KernelReleaseIsUname) {
  struct utsname u {};
  ASSERT_EQ(::uname(&u), 0);
  EXPECT_EQ(facts().kernel_release, u.release);
  EXPECT_EQ(facts().running_as_root, ::geteuid() == 0);
}

TEST(Probe, LandlockAbiIsWhatTheKernelSays) {
  // landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION): 444 on every architecture.
  long abi = ::syscall(444, nullptr, 0, 1U);
  EXPECT_EQ(facts().landlock_abi, abi > 0 ? abi : 0);
  if (facts().landlock_abi == 0) {
    ASSERT_TRUE(facts().reasons.contains("landlock_abi"));
    EXPECT_FALSE(facts().reasons.at("landlock_abi").empty());
  }
}

TEST(Probe, EveryMissingFactHasAReason) {
  const HostFacts& f = facts();
  auto check = [&](bool ok, const char* fact) {
    if (!ok) {
      ASSERT_TRUE(f.reasons.contains(fact)) << fact;
      EXPECT_FALSE(f.reasons.at(fact).empty()) << fact;
    }
  };
  check(f.landlock_abi > 0, "landlock_abi");
  check(f.seccomp_filter, "seccomp_filter");
  check(f.no_new_privs, "no_new_privs");
  check(f.user_namespaces, "user_namespaces");
  check(f.overlayfs_in_userns, "overlayfs_in_userns");
  check(f.kvm_usable, "kvm_usable");
  check(f.cgroup_v2_controllers.size() == std::size(kProbedControllers), "cgroup_v2_controllers");
  check(f.cgroup_v1_writable.size() == std::size(kProbedControllers), "cgroup_v1_writable");
  EXPECT_FALSE(f.reasons.contains("probe_cleanup")) << reason_for(f, "probe_cleanup");
  // Overlay inside a user namespace needs the namespace first.
  EXPECT_TRUE(!f.overlayfs_in_userns || f.user_namespaces);
  // Only the controllers the planner uses are reported.
  for (const auto* list : {&f.cgroup_v2_controllers, &f.cgroup_v1_writable})
    for (const auto& c : *list) EXPECT_TRUE(c == "cpu" || c == "memory" || c == "pids") << c;
}

TEST(Probe, LeavesNoTempDirsOrCgroupsBehind) {
  const auto dirs = probe_dirs();
  std::vector<std::set<std::string>> before;
  for (const auto& d : dirs) before.push_back(probe_entries(d));
  HostFacts f = probe_host();
  for (size_t i = 0; i < dirs.size(); ++i) {
    for (const auto& name : probe_entries(dirs[i]))
      EXPECT_TRUE(before[i].contains(name)) << "probe left " << dirs[i] << "/" << name;
  }
  EXPECT_FALSE(f.reasons.contains("probe_cleanup")) << f.reasons["probe_cleanup"];
}

TEST(Probe, GivesTheSameFactsFromAMultiThreadedProcess) {
  // Children are forked from a process with another thread alive: unshare(CLONE_NEWUSER) would
  // fail in the parent itself, and a child that allocated could deadlock.
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop) {
      std::string s(1000, 'x');
      (void)s;
    }
  });
  HostFacts f = probe_host();
  stop = true;
  busy.join();
  EXPECT_EQ(f.seccomp_filter, facts().seccomp_filter);
  EXPECT_EQ(f.user_namespaces, facts().user_namespaces);
  EXPECT_EQ(f.overlayfs_in_userns, facts().overlayfs_in_userns);
  EXPECT_EQ(f.cgroup_v1_writable, facts().cgroup_v1_writable);
  EXPECT_EQ(f.cgroup_v2_controllers, facts().cgroup_v2_controllers);
}

TEST(ProbeParsers, MountinfoOnAHybridHost) {
  const char* text =
      "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
      "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
      "33 31 0:30 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
      "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
      "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
      "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
      "50 23 0:40 / /mnt/with\\040space rw - ext4 /dev/sda1 rw\n";
  const auto mounts = parse_mountinfo(text);
  ASSERT_EQ(mounts.size(), 7u);
  EXPECT_EQ(mounts[1].fstype, "cgroup");
  EXPECT_EQ(mounts[1].super_options, "rw,cpu,cpuacct");
  EXPECT_EQ(mounts[5].fstype, "cgroup2");
  EXPECT_EQ(mounts[6].mount_point, "/mnt/with space");

  const auto cgroups = parse_proc_cgroup(
      "9:name=systemd:/\n8:pids:/a\n4:memory:/process_api/abc\n2:cpu,cpuacct:/\n1:cpuset:/\n0::/x/y\n");
  ASSERT_EQ(cgroups.size(), 6u);
  EXPECT_EQ(cgroups[3].controllers, (std::vector<std::string>{"cpu", "cpuacct"}));
  EXPECT_EQ(cgroups[5].hierarchy_id, "0");
  EXPECT_TRUE(cgroups[5].controllers.empty());

  EXPECT_EQ(cgroup_v2_dir(mounts, cgroups).value_or(""), "/sys/fs/cgroup/unified/x/y");
  EXPECT_EQ(cgroup_v1_dir("memory", mounts, cgroups).value_or(""), "/sys/fs/cgroup/memory/process_api/abc");
  EXPECT_EQ(cgroup_v1_dir("pids", mounts, cgroups).value_or(""), "/sys/fs/cgroup/pids/a");
  // "cpu" must not match the cpuset hierarchy, nor "cpuacct" alone.
  EXPECT_EQ(cgroup_v1_dir("cpu", mounts, cgroups).value_or(""), "/sys/fs/cgroup/cpu,cpuacct");
  std::string why;
  EXPECT_FALSE(cgroup_v1_dir("hugetlb", mounts, cgroups, &why).has_value());
  EXPECT_FALSE(why.empty());
}

TEST(ProbeParsers, AMountWhoseRootIsNotSlash) {
  // In a container the cgroup2 mount shows only a subtree; our path is relative to the same root.
  const auto mounts =
      parse_mountinfo("60 50 0:38 /kubepods/pod1 /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n");
  EXPECT_EQ(cgroup_v2_dir(mounts, parse_proc_cgroup("0::/kubepods/pod1/c1\n")).value_or(""),
            "/sys/fs/cgroup/c1");
  EXPECT_EQ(cgroup_v2_dir(mounts, parse_proc_cgroup("0::/kubepods/pod1\n")).value_or(""), "/sys/fs/cgroup");
  std::string why;
  EXPECT_FALSE(cgroup_v2_dir(mounts, parse_proc_cgroup("0::/kubepods/pod10\n"), &why).has_value());
  EXPECT_FALSE(why.empty());
  EXPECT_FALSE(cgroup_v2_dir({}, parse_proc_cgroup("0::/\n"), &why).has_value());
  EXPECT_FALSE(cgroup_v2_dir(mounts, parse_proc_cgroup("4:memory:/\n"), &why).has_value());
}

// --- Tier features: a named skip here, a failure under AIRLOCK_REQUIRE_ALL_TIERS=1 ---------------

TEST(ProbeTiers, LandlockAbiAtLeast3) {
  REQUIRE_FEATURE(
      facts().landlock_abi >= 3, "Landlock ABI >= 3",
      fmt::format("measured ABI {}; {}", facts().landlock_abi, reason_for(facts(), "landlock_abi")));
}

TEST(ProbeTiers, SeccompFilter) {
  REQUIRE_FEATURE(facts().seccomp_filter, "seccomp filters", reason_for(facts(), "seccomp_filter"));
  EXPECT_TRUE(facts().no_new_privs);
}

TEST(ProbeTiers, UserNamespaces) {
  REQUIRE_FEATURE(facts().user_namespaces, "user namespaces", reason_for(facts(), "user_namespaces"));
}

TEST(ProbeTiers, CgroupControllers) {
  std::string missing;
  for (std::string_view c : kProbedControllers)
    if (!facts().has_cgroup_controller(c)) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", c);
  REQUIRE_FEATURE(missing.empty(), "writable cgroup controllers " + missing,
                  "v2: " + reason_for(facts(), "cgroup_v2_controllers") +
                      " | v1: " + reason_for(facts(), "cgroup_v1_writable"));
}

// KVM only accelerates the microvm tier (TCG runs it without), so its absence is a named skip even
// under AIRLOCK_REQUIRE_ALL_TIERS=1; the microvm tier's own tests fail there if it cannot run.
TEST(ProbeTiers, Kvm) {
  const bool node = ::access("/dev/kvm", F_OK) == 0;
  if (!node) {
    EXPECT_FALSE(facts().kvm_usable) << "kvm_usable without a /dev/kvm";
  }
  if (!facts().kvm_usable) {
    const std::string why = reason_for(facts(), "kvm_usable");
    EXPECT_TRUE(facts().reasons.count("kvm_usable")) << "no reason recorded for kvm_usable";
    if (!node) {
      EXPECT_NE(why.find("does not exist"), std::string::npos) << why;
    }
    GTEST_SKIP() << "host lacks a usable /dev/kvm (microvm runs under TCG): " << why;
  }
}

}  // namespace
}  // namespace airlock::linux

// --- The per-boot facts cache (exec::HostProbe, exec/facts_cache.h) -----------------------------

namespace airlock::exec {
namespace {

Json cache_doc(const testing::ScratchDir& dir) {
  auto text = read_file(dir.file(std::string(kFactsCacheFile)));
  EXPECT_TRUE(text) << "no cache file";
  return text ? Json::parse(*text) : Json();
}

void write_cache_doc(const testing::ScratchDir& dir, const Json& doc, mode_t mode = 0600) {
  const std::string path = dir.file(std::string(kFactsCacheFile));
  ASSERT_TRUE(write_file_atomic(path, doc.dump(), 0600));
  ASSERT_EQ(::chmod(path.c_str(), mode), 0);
}

// The document a real probe leaves in `dir`.
Json cache_doc_after_probe(const testing::ScratchDir& dir) {
  (void)HostProbe(dir.file(""), HostProbe::Measure::Fresh).facts({});
  return cache_doc(dir);
}

// A cache whose kernel release was changed in place: what a PerBoot probe returns tells whether it
// read the file (the planted value) or measured (the real one).
Json planted(Json doc) {
  doc["facts"]["kernel_release"] = "planted-by-the-test";
  return doc;
}

constexpr plan::FactNeeds kLandlockOnly{};

TEST(FactsCache, TheKeyNamesTheBootTheBuildAndTheCaller) {
  auto key = facts_cache_key();
  ASSERT_TRUE(key) << "this test binary has no GNU build id or /proc has no boot id";
  EXPECT_EQ((*key)["boot_id"], *read_file("/proc/sys/kernel/random/boot_id"));
  EXPECT_EQ((*key)["airlock_build_id"].get<std::string>().size(), 40u);  // SHA-1 of the linked program
  EXPECT_EQ((*key)["euid"], ::geteuid());
  EXPECT_EQ((*key)["proc_self_cgroup"], *read_file("/proc/self/cgroup"));
  EXPECT_EQ(*key, *facts_cache_key()) << "the key must be stable within a boot";
}

TEST(FactsCache, AProbeKeepsItsFactsAndTheNextReusesThem) {
  testing::ScratchDir dir;
  auto first = HostProbe(dir.file("")).facts(kLandlockOnly);
  auto doc = cache_doc(dir);
  struct stat st {};
  ASSERT_EQ(::stat(dir.file(std::string(kFactsCacheFile)).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(doc["key"], *facts_cache_key());
  EXPECT_EQ(doc["facts"]["kernel_release"], first.kernel_release);
  EXPECT_FALSE(first.reasons.contains(std::string(kFactsCachedReason))) << "measured facts said they were kept";
  EXPECT_FALSE(doc["facts"]["reasons"].contains(std::string(kFactsCachedReason)));
  EXPECT_GT(doc["measured_at"].get<int64_t>(), 0);
  write_cache_doc(dir, planted(doc));
  auto kept = HostProbe(dir.file("")).facts(kLandlockOnly);
  EXPECT_EQ(kept.kernel_release, "planted-by-the-test");
  // Kept facts say so, and when they were measured: a receipt never shows them as measured now.
  ASSERT_TRUE(kept.reasons.contains(std::string(kFactsCachedReason)));
  EXPECT_TRUE(kept.reasons.at(std::string(kFactsCachedReason)).starts_with("measured at 20"))
      << kept.reasons.at(std::string(kFactsCachedReason));
  // Fresh measures, and keeps what it measured.
  auto fresh = HostProbe(dir.file(""), HostProbe::Measure::Fresh).facts(kLandlockOnly);
  EXPECT_EQ(fresh.kernel_release, first.kernel_release);
  EXPECT_FALSE(fresh.reasons.contains(std::string(kFactsCachedReason)));
  EXPECT_EQ(cache_doc(dir)["facts"]["kernel_release"], first.kernel_release);
}

TEST(FactsCache, AnyDifferenceInTheKeyMeasuresAgain) {
  testing::ScratchDir dir;
  auto real = HostProbe(dir.file("")).facts(kLandlockOnly).kernel_release;
  for (const char* part : {"boot_id", "airlock_build_id", "euid", "proc_self_cgroup", "delegated_cgroups", "dev_kvm"}) {
    auto doc = planted(cache_doc(dir));
    doc["key"][part] = "another";
    write_cache_doc(dir, doc);
    EXPECT_EQ(HostProbe(dir.file("")).facts(kLandlockOnly).kernel_release, real) << part;
    EXPECT_EQ(cache_doc(dir)["key"], *facts_cache_key()) << part << ": the cache was not rewritten";
  }
}

TEST(FactsCache, AFileAnotherCouldWriteOrThatIsTornIsNotBelieved) {
  testing::ScratchDir dir;
  auto real = HostProbe(dir.file("")).facts(kLandlockOnly).kernel_release;
  write_cache_doc(dir, planted(cache_doc(dir)), 0622);
  EXPECT_EQ(HostProbe(dir.file("")).facts(kLandlockOnly).kernel_release, real) << "a group-writable cache was read";
  auto text = planted(cache_doc(dir)).dump();
  ASSERT_TRUE(write_file_atomic(dir.file(std::string(kFactsCacheFile)), text.substr(0, text.size() / 2), 0600));
  EXPECT_EQ(HostProbe(dir.file("")).facts(kLandlockOnly).kernel_release, real);
  auto doc = planted(cache_doc(dir));
  doc["facts"]["no_such_fact"] = true;  // read back strictly, like --facts FILE
  write_cache_doc(dir, doc);
  EXPECT_EQ(HostProbe(dir.file("")).facts(kLandlockOnly).kernel_release, real);
}

TEST(FactsCache, AnInconclusiveProbeIsNeverKept) {
  testing::ScratchDir dir;
  auto key = facts_cache_key();
  ASSERT_TRUE(key);
  plan::HostFacts f = plan::facts_everything();
  f.reasons[std::string(linux::kProbeInconclusive)] = "user_namespaces: the probe child did not finish within 2000 ms";
  store_cached_facts(dir.file(""), *key, {plan::FactNeeds::all(), f});
  EXPECT_FALSE(load_cached_facts(dir.file(""), *key)) << "a timed-out probe was kept";
  f.reasons.erase(std::string(linux::kProbeInconclusive));
  f.reasons["probe_cleanup"] = "could not remove probe cgroup";
  store_cached_facts(dir.file(""), *key, {plan::FactNeeds::all(), f});
  EXPECT_FALSE(load_cached_facts(dir.file(""), *key));
  f.reasons.erase("probe_cleanup");
  store_cached_facts(dir.file(""), *key, {plan::FactNeeds::all(), f});
  EXPECT_TRUE(load_cached_facts(dir.file(""), *key));
}

TEST(FactsCache, AFifoOrAMalformedDocumentIsAMissNotAHangOrACrash) {
  testing::ScratchDir dir;
  const std::string path = dir.file(std::string(kFactsCacheFile));
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  auto key = facts_cache_key();
  ASSERT_TRUE(key);
  EXPECT_FALSE(load_cached_facts(dir.file(""), *key));  // returns at once: opened non-blocking, not regular
  ASSERT_EQ(::unlink(path.c_str()), 0);
  Json no_time = cache_doc_after_probe(dir);
  no_time.erase("measured_at");
  for (const Json& doc : {Json{{"schema", 7}, {"key", *key}}, Json::array({1, 2}), Json("text"), no_time,
                          Json{{"schema", "airlock.host_facts_cache.v1"}, {"key", *key}, {"measured", 1}, {"facts", {}}}}) {
    write_cache_doc(dir, doc);
    EXPECT_FALSE(load_cached_facts(dir.file(""), *key)) << doc.dump();
  }
}

TEST(FactsCache, FactsTheCacheDidNotMeasureAreMeasuredAndThenKept) {
  testing::ScratchDir dir;
  (void)HostProbe(dir.file("")).facts(kLandlockOnly);
  EXPECT_FALSE(cache_doc(dir)["measured"]["user_namespaces"].get<bool>());
  write_cache_doc(dir, planted(cache_doc(dir)));
  plan::FactNeeds userns;
  userns.user_namespaces = true;
  auto f = HostProbe(dir.file("")).facts(userns);
  EXPECT_NE(f.kernel_release, "planted-by-the-test");
  EXPECT_EQ(f.reasons.count("user_namespaces") && f.reasons.at("user_namespaces").starts_with("not measured"), false);
  auto doc = cache_doc(dir);
  EXPECT_TRUE(doc["measured"]["user_namespaces"].get<bool>());
  // A policy that needs less is served from the wider cache.
  write_cache_doc(dir, planted(doc));
  EXPECT_EQ(HostProbe(dir.file("")).facts(kLandlockOnly).kernel_release, "planted-by-the-test");
}

}  // namespace
}  // namespace airlock::exec
