// The session view: a private copy of the workspace the command works on, and write-back.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json_util.h"
#include "plan/plan.h"
#include "policy/protected_paths.h"

namespace airlock::exec {

// A session's directories under the state directory; removed when the session ends.
struct SessionDirs {
  std::string root;     // <state>/sessions/<id>, mode 0700
  std::string view;     // root/view: the workspace as the command sees it
  std::string scratch;  // root/tmp: TMPDIR, never written back
  // View paths (relative) a tier with a root of its own binds read-only over the view: the
  // protected paths the view held when it was made (ViewCopy::protected_present).
  std::vector<std::string> view_read_only;
};

// Sweeps abandoned sessions (below), then makes the directories and records the owning process
// (pid and start time) in root/owner, first. remove_session_dirs removes the owner file last.
Result<SessionDirs> make_session_dirs(const std::string& state_dir, const std::string& session_id);
Result<void> remove_session_dirs(const SessionDirs& dirs);

// Removes the directories of sessions whose owning process is gone (an airlock that was
// SIGKILLed leaves its view behind), and those without an owner file (killed while making or
// removing one: both happen under STATE/sessions.lock, which the sweep holds), and releases their
// cgroups; returns their ids. Never touches a session whose owner is alive.
std::vector<std::string> sweep_abandoned_sessions(const std::string& state_dir);

// The pid of the process that owns the session directory `root` (its owner file), when that
// very process (pid and start time) is alive; nullopt otherwise.
std::optional<pid_t> live_session_owner(const std::string& root);

// What the view held right after it was made: how write-back tells a change from none.
struct ViewEntry {
  bool is_dir = false;
  uint64_t ino = 0;
  int64_t ctime_ns = 0;
  uint64_t size = 0;
};
using ViewManifest = std::map<std::string, ViewEntry>;

// What goes into a view and what may come back out of it: one value, made from the plan.
struct ViewRules {
  std::vector<std::string> paths;             // copied in, workspace-relative ("." for all)
  std::vector<std::string> write_back_paths;  // what write-back looks at
  std::vector<std::string> denied_names;      // never copied in, never written back (any depth)
  std::vector<policy::ProtectedPath> protected_paths;  // read-only inside, never written back
  // The first wall: protected paths made read-only in the view (their write bits cleared; the
  // tiers with a root of their own also bind them read-only). Off only through a test seam.
  bool first_wall = true;
};
ViewRules view_rules(const plan::ExecutionPlan& plan);

// What the workspace's own git configuration (.git/config, already protected) names for git to
// run or read later: a core.hooksPath inside the workspace (husky's .husky, a .githooks) and
// included configuration files are protected too, each recorded in the plan with why.
void protect_git_config_targets(const std::string& workspace, plan::ExecutionPlan& plan);

// Test seam: AIRLOCK_TEST_NO_PROTECTED_FIRST_WALL=1 in airlock's environment turns the first wall
// off (so a test can prove write-back refuses alone); the plan records it as a relaxation.
void apply_test_seams(plan::ExecutionPlan& plan);

struct Skipped {
  std::string path;
  std::string reason;  // "denied name", "hard link", "symlink", "device", "fifo", "socket", ...
};

inline constexpr long kStaleWriteBackTempSeconds = 3600;

struct ViewCopy {
  ViewManifest manifest;
  uint64_t files = 0, bytes = 0;
  std::vector<Skipped> skipped;  // workspace entries not copied, and why
  // Protected paths the view holds (the outermost of each subtree), made read-only there.
  std::vector<std::string> protected_present;
  Json to_json() const;
};

// Copies `rules.paths` of the workspace into the view: regular files with one link and
// directories only, never a denied name; a hard-linked file (its other name may lie outside the
// workspace) is skipped, never copied. A path missing from the workspace is made as an empty
// directory when it is also a write-back path (so the command can create it).
Result<ViewCopy> create_view(const std::string& workspace, const std::string& view, const ViewRules& rules);

// write_back's temporary files (.airlock-wb-*) are never copied; those older than
// kStaleWriteBackTempSeconds, left by a write-back that was killed, are removed from the workspace.
Result<ViewCopy> create_view(const std::string& workspace, const std::string& view,
                             const std::vector<std::string>& paths,
                             const std::vector<std::string>& write_back_paths);

struct WriteBackRefusal {
  std::string path;
  // "symlink", "hard link", "device", "fifo", "socket", "setuid", "setgid", "conflict…",
  // "denied name", "protected path …"
  std::string reason;
};

struct WriteBackReport {
  std::vector<std::string> written;
  std::vector<std::string> created_dirs;
  std::vector<std::string> deleted;
  std::vector<std::string> kept;  // deleted in the view, never in the workspace (a `keep` part)
  std::vector<WriteBackRefusal> refused;
  Json to_json() const;
};

// Writes the changes under `rules.write_back_paths` back to the workspace. Only regular files
// and directories cross; anything else is refused by name and written nowhere, and so is any
// change (new, changed, deleted) under a protected path or a denied name: the second wall,
// whatever the first missed. Every workspace path is resolved beneath the workspace with no
// symlink followed (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), and files land by rename,
// so a reader never sees half a file.
Result<WriteBackReport> write_back(const std::string& view, const std::string& workspace,
                                   const ViewManifest& manifest, const ViewRules& rules);

}  // namespace airlock::exec
