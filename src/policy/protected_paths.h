// Protected paths: workspace paths that make a later host process run code or trust something
// (git hooks and config, shell start-up files, editor and agent settings). Pure.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "base/json_util.h"

namespace airlock::policy {

// One entry. `pattern` is '/'-separated components matched at any depth of the workspace; a
// component may use fnmatch's * ? [..] and a whole component "**" matches any number of
// components. Matching ignores case (a case-insensitive filesystem or tool must not slip by).
// What the pattern matches, and everything beneath it, is protected.
struct ProtectedPath {
  std::string pattern;
  bool file_only = false;  // matches only a non-directory (a `.git` file, not the directory)
  std::string why;
  // An allow-list beneath a matched directory: what is protected is everything beneath it except
  // paths (relative to it, patterns as above) these match, or lie beneath. The directory itself
  // stays writable. `.git` is protected so: objects, refs, the index and HEAD are the agent's;
  // config, hooks, commondir, a rebase's todo list and anything git may add later are not.
  std::vector<std::string> except;
  // Beneath the matched directory, what write-back adds to but never changes or deletes (patterns
  // as above): `.git`'s objects, so no commit the host had is lost or corrupted by a command.
  std::vector<std::string> keep;
  // What the matched directory cannot be without (a git directory's HEAD, refs, objects): a
  // deletion of exactly one of these is refused like a protected path's.
  std::vector<std::string> required;
  bool operator==(const ProtectedPath& o) const {
    return pattern == o.pattern && file_only == o.file_only && except == o.except && keep == o.keep &&
           required == o.required;
  }
};

// The built-in list (defaults/protected-paths.json, built in as text). Parsed once; the file is
// part of the build, so a broken one is a bug and aborts.
const std::vector<ProtectedPath>& default_protected_paths();

// Parses a pattern a policy gives (`protected_paths`): relative, no "." or ".." component, no
// empty component, no NUL. `path` is the JSON path named in the refusal.
Result<ProtectedPath> parse_protected_pattern(const std::string& pattern, const std::string& path);

// The entry that protects `rel` (workspace-relative, "a/b"), or nullopt. `is_dir` says what
// `rel` itself is; an entry matched by one of rel's ancestors protects it whatever it is.
std::optional<ProtectedPath> protected_by(const std::vector<ProtectedPath>& entries, std::string_view rel,
                                          bool is_dir);

// When `rel` lies in a `keep` part of an entry (write-back adds there, never changes or deletes):
// the directory the entry matched (the `.git` above it); nullopt otherwise.
std::optional<std::string> kept_by(const std::vector<ProtectedPath>& entries, std::string_view rel);

// When `rel` is exactly one of an entry's `required` paths beneath the directory it matched: that
// entry, and the directory (`.git`) in `root`.
std::optional<ProtectedPath> required_by(const std::vector<ProtectedPath>& entries, std::string_view rel,
                                         std::string* root);

// The shortest leading part of `rel` that `e`'s pattern matches (the directory an allow-list
// entry such as `.git` guards), or "" when none does.
std::string protected_root(const ProtectedPath& e, std::string_view rel);

// Whether `rel`, a path relative to a git directory (a `.git` or a bare repository's), is
// protected by the allow-list of the `.git` entry in `entries` (false when there is none).
std::optional<ProtectedPath> protected_in_git_dir(const std::vector<ProtectedPath>& entries, std::string_view rel);

Json to_json(const std::vector<ProtectedPath>& entries);

}  // namespace airlock::policy
