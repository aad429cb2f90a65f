// Workspace-relative paths ("." is the root): prefix tests and splitting, purely lexical.
#pragma once

#include <string>
#include <vector>

namespace airlock {

// True when `rel` is `prefix` or below it; "." is above everything (and "/" above every absolute path).
bool is_under(const std::string& rel, const std::string& prefix);
bool under_any(const std::string& rel, const std::vector<std::string>& prefixes);
// "a/b/c" -> "a/b"; "c" -> ".".
std::string parent_of(const std::string& rel);
// "a/b/c" -> "c".
std::string name_of(const std::string& rel);

}  // namespace airlock
