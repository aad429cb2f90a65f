// mounts: new-root construction for the namespaces tier.
#include "linux/mounts.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <set>

namespace airlock::linux {
namespace {

using Kind = MountOp::Kind;

std::string parent_of(const std::string& p) {
  auto slash = p.rfind('/');
  return slash == 0 ? "/" : p.substr(0, slash);
}

// Mkdir ops for every missing ancestor of `dst` (inside new_root), each once.
void mkdirs(MountProgram& prog, std::set<std::string>& made, const std::string& dst) {
  if (dst == prog.new_root || made.count(dst)) return;
  mkdirs(prog, made, parent_of(dst));
  prog.ops.push_back({Kind::Mkdir, "", dst, ""});
  made.insert(dst);
}

// The flags a read-only remount must keep: in a user namespace the kernel refuses to clear
// nosuid, nodev, noexec or the atime flags that the source mount had (they are locked).
unsigned long locked_flags(const char* path) noexcept {
  struct statvfs sv {};
  if (::statvfs(path, &sv) != 0) return 0;
  unsigned long f = 0;
  if (sv.f_flag & ST_NOSUID) f |= MS_NOSUID;
  if (sv.f_flag & ST_NODEV) f |= MS_NODEV;
  if (sv.f_flag & ST_NOEXEC) f |= MS_NOEXEC;
  if (sv.f_flag & ST_NOATIME) f |= MS_NOATIME;
  if (sv.f_flag & ST_NODIRATIME) f |= MS_NODIRATIME;
  if (sv.f_flag & ST_RELATIME) f |= MS_RELATIME;
  return f;
}

// A view path bound read-only onto itself, found without following any symlink: open_tree
// clones the entry's mount, mount_setattr makes the clone read-only, move_mount puts it on top.
int bind_read_only_beneath(const char* root, const char* rel) noexcept {
  int rootfd = ::open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0) return errno;
  struct open_how how {};
  how.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  int fd = static_cast<int>(::syscall(SYS_openat2, rootfd, rel, &how, sizeof how));
  int err = fd < 0 ? errno : 0;
  ::close(rootfd);
  if (fd < 0) return err == ENOENT || err == ELOOP || err == ENOTDIR || err == EXDEV ? 0 : err;
  int rc = 0;
  int tree = static_cast<int>(
      ::syscall(SYS_open_tree, fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE));
  if (tree < 0) {
    rc = errno;
  } else {
    struct mount_attr attr {};
    attr.attr_set = MOUNT_ATTR_RDONLY;
    if (::syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) != 0 ||
        ::syscall(SYS_move_mount, tree, "", fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0)
      rc = errno;
    ::close(tree);
  }
  ::close(fd);
  return rc;
}

int remount_read_only(const char* path) noexcept {
  if (::mount(nullptr, path, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | locked_flags(path), nullptr) != 0)
    return errno;
  return 0;
}

}  // namespace

Result<MountProgram> prepare_mounts(const plan::NamespacesPlan& plan, const std::string& new_root,
                                    const std::string& view, const std::string& scratch,
                                    const std::string& workspace_inside,
                                    const std::vector<std::string>& view_read_only) {
  MountProgram prog;
  prog.new_root = new_root;
  prog.workdir = workspace_inside;
  std::set<std::string> made;
  auto in = [&](const std::string& p) { return new_root + p; };
  prog.ops.push_back({Kind::Tmpfs, "", new_root, "mode=0755,size=16m"});
  for (const auto& path : plan.ro_binds) {
    struct stat st{};
    if (::lstat(path.c_str(), &st) != 0) continue;  // not on this host (e.g. /lib32)
    mkdirs(prog, made, parent_of(in(path)));
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
      if (n < 0) return fail_errno(Code::ExecutorUnavailable, "readlink " + path, errno);
      prog.ops.push_back({Kind::Symlink, std::string(target, static_cast<size_t>(n)), in(path), ""});
      prog.applied.binds.push_back({path, true});
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      prog.ops.push_back({Kind::Mkdir, "", in(path), ""});
      made.insert(in(path));
    } else {
      prog.ops.push_back({Kind::CreateFile, "", in(path), ""});
    }
    prog.ops.push_back({Kind::BindReadOnly, path, in(path), ""});
    prog.applied.binds.push_back({path, false});
  }
  // A minimal /dev: a tmpfs holding binds of a few host device nodes, and the usual links.
  mkdirs(prog, made, in("/dev"));
  prog.ops.push_back({Kind::Tmpfs, "", in("/dev"), "mode=0755,size=64k,nr_inodes=64"});
  for (const auto& node : plan.dev_nodes) {
    prog.ops.push_back({Kind::CreateFile, "", in(node), ""});
    prog.ops.push_back({Kind::BindWritable, node, in(node), ""});
  }
  prog.ops.push_back({Kind::Symlink, "/proc/self/fd", in("/dev/fd"), ""});
  prog.ops.push_back({Kind::Symlink, "/proc/self/fd/0", in("/dev/stdin"), ""});
  prog.ops.push_back({Kind::Symlink, "/proc/self/fd/1", in("/dev/stdout"), ""});
  prog.ops.push_back({Kind::Symlink, "/proc/self/fd/2", in("/dev/stderr"), ""});
  prog.ops.push_back({Kind::RemountReadOnly, "", in("/dev"), ""});
  // Credential files beneath a bind: a file is covered by /dev/null, a directory by an empty
  // tmpfs no one may enter. Only what exists as a file or directory is planned (facts).
  for (const auto& path : plan.masked) {
    struct stat st{};
    // A symlink is left as it is: its target is in the list too (HostFacts::credential_files).
    if (::lstat(path.c_str(), &st) != 0 || S_ISLNK(st.st_mode)) continue;
    if (S_ISDIR(st.st_mode))
      prog.ops.push_back({Kind::Tmpfs, "", in(path), "mode=000,size=4k,nr_inodes=1"});
    else if (S_ISREG(st.st_mode))
      prog.ops.push_back({Kind::BindReadOnly, in("/dev/null"), in(path), ""});
    else
      return fail(Code::ExecutorUnavailable,
                  fmt::format("the credential file {} is neither a file nor a directory; it cannot be covered", path),
                  {{"path", path}});
    prog.applied.credentials_masked.push_back(path);
  }
  // A fresh /proc for the new pid namespace; what it would reveal of the kernel is covered.
  mkdirs(prog, made, in("/proc"));
  prog.ops.push_back({Kind::Proc, "", in("/proc"), ""});
  for (const auto& p : plan.proc_masked) prog.ops.push_back({Kind::BindReadOnly, in("/dev/null"), in(p), "optional"});
  for (const auto& p : plan.proc_read_only) prog.ops.push_back({Kind::BindReadOnly, in(p), in(p), "optional"});
  // The scratch directory as /tmp, and the view at the workspace's own path.
  mkdirs(prog, made, in("/tmp"));
  prog.ops.push_back({Kind::BindWritable, scratch, in("/tmp"), ""});
  mkdirs(prog, made, in(workspace_inside));
  prog.ops.push_back({Kind::BindWritable, view, in(workspace_inside), ""});
  // Protected paths: read-only over the view (the first wall; write-back is the second).
  for (const auto& rel : view_read_only)
    prog.ops.push_back({Kind::BindReadOnlyBeneath, in(workspace_inside), in(workspace_inside) + "/" + rel, rel});
  prog.applied.dev = plan.dev_nodes;
  prog.applied.proc_masked = plan.proc_masked;
  prog.applied.proc_read_only = plan.proc_read_only;
  prog.applied.protected_read_only = view_read_only;
  prog.applied.workspace = workspace_inside;
  return prog;
}

int apply_mounts(const MountProgram& prog, int* failed_op) noexcept {
  *failed_op = -1;
  // Nothing we mount may propagate back to the host's mount namespace.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return errno;
  for (size_t i = 0; i < prog.ops.size(); ++i) {
    const MountOp& op = prog.ops[i];
    const char* dst = op.dst.c_str();
    int rc = 0;
    switch (op.kind) {
      case Kind::Mkdir:
        rc = ::mkdir(dst, 0755) == 0 || errno == EEXIST ? 0 : errno;
        break;
      case Kind::CreateFile: {
        int fd = ::open(dst, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        rc = fd >= 0 ? 0 : errno;
        if (fd >= 0) ::close(fd);
        break;
      }
      case Kind::Symlink:
        rc = ::symlink(op.src.c_str(), dst) == 0 ? 0 : errno;
        break;
      case Kind::Tmpfs:
        rc = ::mount("tmpfs", dst, "tmpfs", MS_NOSUID | MS_NODEV, op.data.c_str()) == 0 ? 0 : errno;
        break;
      case Kind::Proc:
        rc = ::mount("proc", dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) == 0 ? 0 : errno;
        break;
      case Kind::BindWritable:
        rc = ::mount(op.src.c_str(), dst, nullptr, MS_BIND | MS_REC, nullptr) == 0 ? 0 : errno;
        break;
      case Kind::BindReadOnly:
        if (::mount(op.src.c_str(), dst, nullptr, MS_BIND | MS_REC, nullptr) != 0) {
          rc = (op.data == "optional" && errno == ENOENT) ? 0 : errno;
          break;
        }
        rc = remount_read_only(dst);
        break;
      case Kind::RemountReadOnly:
        rc = remount_read_only(dst);
        break;
      case Kind::BindReadOnlyBeneath:
        rc = bind_read_only_beneath(op.src.c_str(), op.data.c_str());
        break;
    }
    if (rc != 0) {
      *failed_op = static_cast<int>(i);
      return rc;
    }
  }
  // pivot_root(".", "."): the old root ends up on top of the new one and is detached at once,
  // so no path to the host's tree remains.
  if (::chdir(prog.new_root.c_str()) != 0) return errno;
  if (::syscall(SYS_pivot_root, ".", ".") != 0) return errno;
  if (::umount2(".", MNT_DETACH) != 0) return errno;
  if (::chdir("/") != 0) return errno;
  if (int rc = remount_read_only("/")) return rc;
  return 0;
}

}  // namespace airlock::linux
