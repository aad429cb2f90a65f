// The session view: a private copy of the workspace the command works on, and write-back.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/json_util.h"

namespace airlock::exec {

// A session's directories under the state directory; removed when the session ends.
struct SessionDirs {
  std::string root;     // <state>/sessions/<id>, mode 0700
  std::string view;     // root/view: the workspace as the command sees it
  std::string scratch;  // root/tmp: TMPDIR, never written back
};

// Makes the directories and records the owning process (pid and start time) in root/owner.
Result<SessionDirs> make_session_dirs(const std::string& state_dir, const std::string& session_id);
Result<void> remove_session_dirs(const SessionDirs& dirs);

// Removes the directories of sessions whose owning process is gone (an airlock that was
// SIGKILLed leaves its view behind) and returns their ids, so the caller can release what
// else they held (their cgroups). Never touches a session whose owner is alive.
std::vector<std::string> sweep_abandoned_sessions(const std::string& state_dir);

// What the view held right after it was made: how write-back tells a change from none.
struct ViewEntry {
  bool is_dir = false;
  uint64_t ino = 0;
  int64_t ctime_ns = 0;
  uint64_t size = 0;
};
using ViewManifest = std::map<std::string, ViewEntry>;

inline constexpr long kStaleWriteBackTempSeconds = 3600;

struct ViewCopy {
  ViewManifest manifest;
  uint64_t files = 0, bytes = 0;
  std::vector<std::string> skipped;  // workspace entries not copied (symlinks, special files)
};

// Copies `paths` (workspace-relative, "." for all) of the workspace into the view: regular
// files and directories only. A path missing from the workspace is made as an empty
// directory when it is also a write-back path (so the command can create it).
// write_back's temporary files (.airlock-wb-*) are never copied; those older than
// kStaleWriteBackTempSeconds, left by a write-back that was killed, are removed from the workspace.
Result<ViewCopy> create_view(const std::string& workspace, const std::string& view,
                             const std::vector<std::string>& paths,
                             const std::vector<std::string>& write_back_paths);

struct WriteBackRefusal {
  std::string path;
  std::string reason;  // "symlink", "hard link", "device", "fifo", "socket", "setuid", "setgid", "conflict"
};

struct WriteBackReport {
  std::vector<std::string> written;
  std::vector<std::string> created_dirs;
  std::vector<std::string> deleted;
  std::vector<WriteBackRefusal> refused;
  Json to_json() const;
};

// Writes the changes under `write_back_paths` back to the workspace. Only regular files and
// directories cross; anything else is refused by name and written nowhere. Every workspace
// path is resolved beneath the workspace with no symlink followed (openat2 RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS), and files land by rename, so a reader never sees half a file.
Result<WriteBackReport> write_back(const std::string& view, const std::string& workspace,
                                   const ViewManifest& manifest,
                                   const std::vector<std::string>& write_back_paths);

}  // namespace airlock::exec
