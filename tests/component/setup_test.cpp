// `airlock setup delegate`: root gives an unprivileged user cgroups of its own, and that user's
// airlock then runs on the namespaces tier; refusals by name; nothing left behind.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <memory>

#include "cli_support.h"

namespace airlock::testing {
namespace {

namespace fs = std::filesystem;
constexpr uid_t kNobody = 65534;
constexpr const char* kControllers[] = {"memory", "pids", "cpu"};

// The one documented place (src/linux/cgroup.h, delegated_cgroup_dir), spelled out here so a
// move of it shows as a failing test.
std::string delegated_dir(const std::string& controller, uid_t uid) {
  return "/sys/fs/cgroup/" + controller + "/airlock.delegate/" + std::to_string(uid);
}

bool v1_hierarchies() {
  for (const char* c : kControllers)
    if (!exists(std::string("/sys/fs/cgroup/") + c + "/cgroup.procs")) return false;
  return true;
}

// Removes whatever a failed test left in the delegated place: sandbox cgroups inside, the
// user's directory, and the shared parent once it is empty.
void remove_delegation(uid_t uid) {
  for (const char* c : kControllers) {
    std::string d = delegated_dir(c, uid);
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec))
      if (e.is_directory()) ::rmdir(e.path().c_str());
    ::rmdir(d.c_str());
    ::rmdir(fs::path(d).parent_path().c_str());
  }
}

// The executor line of `airlock doctor` (its text form) for `executor`.
std::string doctor_line(const std::string& out, const std::string& executor) {
  size_t at = out.find("  " + executor + " ");
  if (at == std::string::npos) return "";
  return out.substr(at, out.find('\n', at) - at);
}

class SetupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!identity_available(Identity::Nobody, &why)) {
      if (require_all_tiers()) FAIL() << why;
      GTEST_SKIP() << why;
    }
    if (!v1_hierarchies()) {
      if (require_all_tiers()) FAIL() << "no cgroup v1 hierarchies of memory, pids and cpu";
      GTEST_SKIP() << "no cgroup v1 hierarchies of memory, pids and cpu (setup delegate is v1 only)";
    }
    for (const char* c : kControllers)
      if (exists(delegated_dir(c, kNobody)))
        GTEST_SKIP() << delegated_dir(c, kNobody) << " exists already: not this test's to remove";
    root_ = std::make_unique<CliFixture>(Identity::Self);
    // Without the fixture's own delegation (a cgroup below the test's): this test proves that
    // nobody's airlock finds the directory `setup delegate` made.
    ::setenv("AIRLOCK_TEST_NO_DELEGATION", "1", 1);
    nobody_ = std::make_unique<CliFixture>(Identity::Nobody);
    ::unsetenv("AIRLOCK_TEST_NO_DELEGATION");
    cleanup_ = true;
  }
  void TearDown() override {
    nobody_.reset();
    if (cleanup_) remove_delegation(kNobody);
  }

  std::unique_ptr<CliFixture> root_, nobody_;
  bool cleanup_ = false;
};

TEST_F(SetupTest, DelegateGivesNobodyTheNamespacesTierAndUndelegateRemovesIt) {
  auto before = nobody_->run({"doctor"});
  ASSERT_EQ(before.status, 0) << before.err;
  std::string line = doctor_line(before.out, "namespaces");
  if (line.find("user namespaces are not available") != std::string::npos) {
    if (require_all_tiers()) FAIL() << line;
    GTEST_SKIP() << line;
  }
  EXPECT_NE(line.find("unavailable"), std::string::npos) << before.out;
  const std::string fix = "; to fix: sudo airlock setup delegate nobody";
  ASSERT_GE(line.size(), fix.size()) << line;
  EXPECT_EQ(line.substr(line.size() - fix.size()), fix) << line;

  auto made = root_->run({"setup", "delegate", "nobody"});
  ASSERT_EQ(made.status, 0) << made.err << made.out;
  for (const char* c : kControllers) {
    std::string d = delegated_dir(c, kNobody);
    struct stat st {};
    ASSERT_EQ(::stat(d.c_str(), &st), 0) << d;
    EXPECT_TRUE(S_ISDIR(st.st_mode)) << d;
    for (const std::string& f : {d, d + "/cgroup.procs", d + "/tasks"}) {
      ASSERT_EQ(::stat(f.c_str(), &st), 0) << f;
      EXPECT_EQ(st.st_uid, kNobody) << f;
    }
  }
  auto again = root_->run({"setup", "delegate", "nobody"});
  EXPECT_EQ(again.status, 0) << "idempotent: " << again.err;

  auto after = nobody_->run({"doctor"});
  ASSERT_EQ(after.status, 0) << after.err;
  EXPECT_NE(doctor_line(after.out, "namespaces").find("available"), std::string::npos) << after.out;
  EXPECT_EQ(doctor_line(after.out, "namespaces").find("unavailable"), std::string::npos) << after.out;
  EXPECT_NE(after.out.find("cgroup v1 base: /sys/fs/cgroup/<controller>/airlock.delegate/65534 (delegated)"),
            std::string::npos)
      << after.out;

  std::string policy =
      nobody_->write_policy(R"({"schema_version": "airlock.task_policy.v1", "executor": "namespaces"})");
  auto run =
      nobody_->run({"run", "--policy", policy, "--workspace", nobody_->workspace(), "--", "/bin/true"});
  ASSERT_EQ(run.status, 0) << run.err << run.out;
  auto files = nobody_->receipts();
  ASSERT_EQ(files.size(), 1u);
  auto open = read_receipts(files[0]).at(0);
  EXPECT_EQ(open["executor"], "namespaces") << open.dump();
  EXPECT_EQ(open["host_facts"]["cgroup_v1_base"], "/sys/fs/cgroup/<controller>/airlock.delegate/65534")
      << open.dump();
  // The run's cgroups were made beneath the delegated directories and removed again.
  for (const char* c : kControllers) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(delegated_dir(c, kNobody), ec))
      EXPECT_FALSE(e.is_directory()) << "left behind: " << e.path();
  }

  auto removed = root_->run({"setup", "undelegate", "nobody"});
  ASSERT_EQ(removed.status, 0) << removed.err << removed.out;
  for (const char* c : kControllers)
    EXPECT_FALSE(exists(delegated_dir(c, kNobody))) << delegated_dir(c, kNobody);
  auto nothing = root_->run({"setup", "undelegate", "nobody"});
  EXPECT_EQ(nothing.status, 0) << "idempotent: " << nothing.err;
}

TEST_F(SetupTest, DelegateByAnUnprivilegedUserIsRefusedAndMakesNothing) {
  auto r = nobody_->run({"setup", "delegate", "nobody"});
  EXPECT_EQ(r.status, 125) << r.err << r.out;
  EXPECT_NE(r.err.find("AIRLOCK_UNAUTHORIZED"), std::string::npos) << r.err;
  for (const char* c : kControllers) EXPECT_FALSE(exists(delegated_dir(c, kNobody)));
}

TEST_F(SetupTest, DelegateToAnUnknownUserIsRefusedAndMakesNothing) {
  auto r = root_->run({"setup", "delegate", "airlock-no-such-user"});
  EXPECT_EQ(r.status, 125) << r.err << r.out;
  EXPECT_NE(r.err.find("AIRLOCK_OPTION_INVALID"), std::string::npos) << r.err;
  auto u = root_->run({"setup", "undelegate", "airlock-no-such-user"});
  EXPECT_EQ(u.status, 125) << u.err << u.out;
  EXPECT_NE(u.err.find("AIRLOCK_OPTION_INVALID"), std::string::npos) << u.err;
}

}  // namespace
}  // namespace airlock::testing
