// Binary custody: airlock refuses at entry, before any flag, to run from a file or directory an
// identity other than root or the running user could replace, names what it found and prints the
// commands that fix it; the state directory and key files are held to the same standard.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/custody.h"
#include "cli_support.h"

namespace airlock::testing {
namespace {

namespace fs = std::filesystem;
constexpr uid_t kNobody = 65534;

// A copy of the airlock binary in a directory of the test's own.
struct Copy {
  TempDir dir;
  std::string path = dir / "airlock";
  Copy() {
    fs::copy_file(AIRLOCK_BINARY, path);
    ::chmod(path.c_str(), 0755);
  }
  CliResult run(const std::vector<std::string>& args = {"--help"}) {
    CliFixture fx(Identity::Self);
    std::vector<std::string> argv = {path};
    argv.insert(argv.end(), args.begin(), args.end());
    return fx.run_program(argv);
  }
};

void expect_custody_refusal(const CliResult& r, const std::string& found, const std::string& fix,
                            bool executable = true) {
  EXPECT_EQ(r.status, 125) << r.err;
  EXPECT_NE(r.err.find("airlock: refused: AIRLOCK_CUSTODY_UNSAFE"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(found), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fix it with: " + fix), std::string::npos) << r.err;
  // The runner design's rule: an executable's refusal says what the check does not cover.
  if (executable) {
    EXPECT_NE(r.err.find("this check does not cover the identity of the binary's publisher, the directories above "
                         "the binary's parent, ACLs, extended attributes"),
              std::string::npos)
        << r.err;
  }
}

// Runs the first fix command the refusal printed, then airlock again.
void apply_fix_and_rerun(Copy& c, const CliResult& refused) {
  auto at = refused.err.find("fix it with: ");
  ASSERT_NE(at, std::string::npos);
  std::string cmd = refused.err.substr(at + 13, refused.err.find('\n', at) - at - 13);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto again = c.run();
  EXPECT_EQ(again.status, 0) << again.err;
}

TEST(BinaryCustody, ASafeCopyRuns) {
  Copy c;
  EXPECT_EQ(c.run().status, 0);
}

TEST(BinaryCustody, GroupWritableFileIsRefusedAndTheFixWorks) {
  Copy c;
  ::chmod(c.path.c_str(), 0775);
  auto r = c.run();
  expect_custody_refusal(r, "is writable by its group (mode 0775)", "chmod go-w '" + c.path + "'");
  apply_fix_and_rerun(c, r);
}

TEST(BinaryCustody, OtherWritableFileIsRefused) {
  Copy c;
  ::chmod(c.path.c_str(), 0757);
  auto r = c.run({"doctor"});
  expect_custody_refusal(r, "is writable by everyone (mode 0757)", "chmod go-w");
  apply_fix_and_rerun(c, r);
}

TEST(BinaryCustody, WritableDirectoryIsRefusedEvenWithTheStickyBit) {
  Copy c;
  ::chmod(c.dir.path().c_str(), 01777);  // what /tmp is
  auto r = c.run();
  expect_custody_refusal(r, "the directory " + c.dir.path() + " holding the airlock executable is writable by everyone",
                         "install -d -m 0755");
  EXPECT_NE(r.err.find("the sticky bit still lets anyone add a file beside it"), std::string::npos) << r.err;
  ::chmod(c.dir.path().c_str(), 0775);
  r = c.run();
  expect_custody_refusal(r, "is writable by its group", "chmod go-w '" + c.dir.path() + "'");
  apply_fix_and_rerun(c, r);
}

TEST(BinaryCustody, ForeignOwnerIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a file to another owner needs root";
  Copy c;
  ASSERT_EQ(::chown(c.path.c_str(), kNobody, kNobody), 0);
  auto r = c.run();
  expect_custody_refusal(r, "is owned by nobody, neither root nor the running user root", "chown root '" + c.path + "'");
  apply_fix_and_rerun(c, r);
  ASSERT_EQ(::chown(c.dir.path().c_str(), kNobody, kNobody), 0);
  r = c.run();
  expect_custody_refusal(r, "holding the airlock executable is owned by nobody", "install -d -m 0755");
}

TEST(StateDirCustody, SymlinkedOrForeignStateDirectoryIsRefused) {
  TempDir d;
  std::string real = d / "state", link = d / "link";
  ::mkdir(real.c_str(), 0700);
  ::symlink(real.c_str(), link.c_str());
  Copy c;
  auto r = c.run({"--state-dir", link, "run", "--", "/bin/true"});
  expect_custody_refusal(r, "the state directory " + link + " is a symlink", "export AIRLOCK_STATE_DIR='" + real + "'",
                         false);
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(real.c_str(), kNobody, kNobody), 0);
    r = c.run({"--state-dir", real, "run", "--", "/bin/true"});
    expect_custody_refusal(r, "the state directory " + real + " is owned by nobody", "chown root '" + real + "'", false);
  }
}

class KeyFile : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& bytes, mode_t mode) {
    std::string p = dir_ / name;
    std::ofstream(p) << bytes;
    ::chmod(p.c_str(), mode);
    return p;
  }
  TempDir dir_;
  std::string key_ = std::string(32, 'k');
};

TEST_F(KeyFile, OwnerOnlyExactLengthIsRead) {
  auto k = read_key_file(write("token", key_ + "\n", 0600), ::geteuid(), 32);
  ASSERT_TRUE(k) << k.error().message;
  EXPECT_EQ(*k, key_);
}

TEST_F(KeyFile, SymlinkIsNotFollowed) {
  std::string real = write("token", key_, 0600), link = dir_ / "link";
  ::symlink(real.c_str(), link.c_str());
  auto k = read_key_file(link, ::geteuid(), 32);
  ASSERT_FALSE(k);
  EXPECT_EQ(k.error().code, Code::CustodyUnsafe);
  EXPECT_NE(k.error().message.find("is a symlink"), std::string::npos) << k.error().message;
  EXPECT_FALSE(k.error().facts["fix"].empty());
}

TEST_F(KeyFile, ReadableByOthersIsRefused) {
  for (mode_t m : {0640, 0604, 0644}) {
    auto k = read_key_file(write("token", key_, m), ::geteuid(), 32);
    ASSERT_FALSE(k) << m;
    EXPECT_EQ(k.error().code, Code::CustodyUnsafe);
    EXPECT_EQ(k.error().facts["fix"][0], "chmod 0600 '" + dir_.path() + "/token'");
  }
}

TEST_F(KeyFile, WrongLengthIsRefused) {
  for (const std::string& bytes : {key_.substr(1), key_ + "x", key_ + "\n\n", std::string()}) {
    auto k = read_key_file(write("token", bytes, 0600), ::geteuid(), 32);
    ASSERT_FALSE(k) << bytes.size();
    EXPECT_EQ(k.error().code, Code::CustodyUnsafe);
    EXPECT_NE(k.error().message.find("not the 32 a key has"), std::string::npos) << k.error().message;
  }
}

TEST_F(KeyFile, ForeignOwnerIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a file to another owner needs root";
  std::string p = write("token", key_, 0600);
  ASSERT_EQ(::chown(p.c_str(), kNobody, kNobody), 0);
  auto k = read_key_file(p, ::geteuid(), 32);
  ASSERT_FALSE(k);
  EXPECT_NE(k.error().message.find("owned by nobody"), std::string::npos) << k.error().message;
}

}  // namespace
}  // namespace airlock::testing
