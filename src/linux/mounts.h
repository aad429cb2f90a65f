// mounts: the namespaces tier's new root, planned in the parent as a flat list of operations
// and walked once by the namespace's init, allocation-free, before pivot_root.
#pragma once

#include <string>
#include <vector>

#include "base/error.h"
#include "plan/plan.h"

namespace airlock::linux {

struct MountOp {
  enum class Kind {
    Mkdir,         // dst
    CreateFile,    // dst (an empty file to bind a file onto)
    Symlink,       // dst -> src
    Tmpfs,         // on dst, with data
    BindReadOnly,  // src on dst, then remounted read-only keeping the source's locked flags
    BindWritable,  // src on dst
    Proc,          // a fresh proc on dst
    RemountReadOnly,  // dst (already a mount point or bound onto itself first)
    // data (a path relative to the view at src), bound read-only onto itself: resolved beneath
    // src with no symlink followed (a command of an earlier run may have planted one); gone or
    // no longer resolvable beneath the view is skipped (write-back refuses any change there).
    BindReadOnlyBeneath,
  };
  Kind kind;
  std::string src;
  std::string dst;   // absolute, inside the new root before pivot
  std::string data;  // tmpfs options
};

// The new root as planned on this host, for the receipt (exec::Enforced). Beyond these: a
// read-only tmpfs as the root, a fresh /proc, and the scratch directory at /tmp.
struct MountsApplied {
  struct Bind {
    std::string path;
    bool symlink = false;  // recreated as a symlink, not bound
  };
  std::vector<Bind> binds;                       // read-only, at the same path
  std::vector<std::string> dev;                  // device nodes bound into a fresh /dev
  std::vector<std::string> proc_masked;          // covered by /dev/null
  std::vector<std::string> proc_read_only;
  std::vector<std::string> credentials_masked;   // present here, and covered
  std::vector<std::string> protected_read_only;  // view-relative, bound read-only over the view
  std::string workspace;                         // where the view is, inside
};

struct MountProgram {
  std::string new_root;  // an empty directory of the session's
  std::vector<MountOp> ops;
  std::string workdir;   // the workspace path, inside
  MountsApplied applied;
};

// Parent side: the plan's binds as they exist on this host (a missing optional path is left
// out, a symlink is recreated as one), the session view at `workspace_inside`, scratch at /tmp,
// and `view_read_only` (view-relative: the protected paths present) bound read-only over the view.
Result<MountProgram> prepare_mounts(const plan::NamespacesPlan& plan, const std::string& new_root,
                                    const std::string& view, const std::string& scratch,
                                    const std::string& workspace_inside,
                                    const std::vector<std::string>& view_read_only = {});

// Child side (the namespace's init, root in its user namespace): makes mounts private, builds the
// new root, pivots into it, detaches the old root and makes / read-only. Returns 0 or an errno;
// `failed_op` is the index of the operation that failed.
int apply_mounts(const MountProgram& program, int* failed_op) noexcept;

}  // namespace airlock::linux
