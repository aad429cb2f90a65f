// The guest image cache: what `airlock vm build` reuses and what it rebuilds, without compiling a
// kernel (a cached "kernel" is any file whose digest the manifest names).
#include "exec/vm_image.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "base/fs.h"
#include "base/hash.h"

namespace airlock::exec {
namespace {

namespace fs = std::filesystem;

class GuestImageCache : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/airlock-vm-image-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    o_.dir = root_ + "/vm";
    o_.linux_source = put("linux-source.tar.xz", "not really a kernel tree");
    o_.agent = put("agent-one", "agent one");
    o_.progress = [this](std::string_view stage, std::string_view) { stages_.emplace_back(stage); };
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string put(const std::string& name, const std::string& bytes) {
    std::ofstream(root_ + "/" + name) << bytes;
    return root_ + "/" + name;
  }
  // A cache as a build of o_ would have left it, with `kernel_bytes` as its kernel.
  void seed(const std::string& kernel_bytes) {
    fs::create_directories(o_.dir);
    std::ofstream(o_.dir + "/vmlinux-seed") << kernel_bytes;
    std::string initramfs = make_initramfs("agent one");
    std::ofstream(o_.dir + "/initramfs-seed.cpio") << initramfs;
    Json m = {{"key", "an older image"},
              {"kernel_key", *guest_kernel_key(o_)},
              {"kernel", "vmlinux-seed"},
              {"kernel_sha256", sha256_hex(kernel_bytes)},
              {"initramfs", "initramfs-seed.cpio"},
              {"initramfs_sha256", sha256_hex(initramfs)}};
    std::ofstream(o_.dir + "/image.json") << m.dump();
  }
  std::string root_;
  BuildOptions o_;
  std::vector<std::string> stages_;
};

TEST_F(GuestImageCache, ANewAgentRepacksTheInitramfsAndKeepsTheVerifiedKernel) {
  seed("kernel bytes");
  o_.agent = put("agent-two", "agent two");
  auto img = build_guest_image(o_);
  ASSERT_TRUE(img) << img.error().message;
  EXPECT_EQ(img->kernel_sha256, sha256_hex(std::string("kernel bytes")));
  EXPECT_EQ(img->initramfs_sha256, sha256_hex(make_initramfs("agent two")));
  EXPECT_EQ(std::count(stages_.begin(), stages_.end(), "extract"), 0) << "the kernel was rebuilt";
  // Built once, the same options reuse the whole image.
  stages_.clear();
  auto again = build_guest_image(o_);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->key, img->key);
  EXPECT_EQ(stages_, std::vector<std::string>{"done"});
}

TEST_F(GuestImageCache, AKernelThatNoLongerMatchesItsDigestIsRebuilt) {
  seed("kernel bytes");
  std::ofstream(o_.dir + "/vmlinux-seed") << "tampered";
  o_.agent = put("agent-two", "agent two");
  auto img = build_guest_image(o_);
  // The fake source cannot be extracted: the point is that a rebuild was attempted, by name.
  ASSERT_FALSE(img);
  EXPECT_EQ(std::count(stages_.begin(), stages_.end(), "extract"), 1);
  EXPECT_TRUE(img.error().facts.contains("log")) << img.error().message;
}

TEST_F(GuestImageCache, ANewLinuxSourceRebuildsTheKernel) {
  seed("kernel bytes");
  o_.linux_source = put("linux-source-2.tar.xz", "another tree");
  auto img = build_guest_image(o_);
  ASSERT_FALSE(img);
  EXPECT_EQ(std::count(stages_.begin(), stages_.end(), "extract"), 1);
}

TEST(GuestImage, TheInitramfsDependsOnTheAgentAlone) {
  EXPECT_EQ(make_initramfs("agent"), make_initramfs("agent"));
  EXPECT_NE(make_initramfs("agent"), make_initramfs("agent2"));
  EXPECT_EQ(make_initramfs("agent").size() % 512, 0u);
}

}  // namespace
}  // namespace airlock::exec
