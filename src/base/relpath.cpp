// Workspace-relative paths: prefix tests and splitting.
#include "base/relpath.h"

#include <algorithm>

namespace airlock {

bool is_under(const std::string& rel, const std::string& prefix) {
  if (prefix == "." || prefix == "/") return true;
  return rel == prefix || (rel.size() > prefix.size() && rel.compare(0, prefix.size(), prefix) == 0 &&
                           rel[prefix.size()] == '/');
}

bool under_any(const std::string& rel, const std::vector<std::string>& prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(), [&](const auto& p) { return is_under(rel, p); });
}

std::string parent_of(const std::string& rel) {
  auto slash = rel.rfind('/');
  return slash == std::string::npos ? "." : rel.substr(0, slash);
}

std::string name_of(const std::string& rel) {
  auto slash = rel.rfind('/');
  return slash == std::string::npos ? rel : rel.substr(slash + 1);
}

}  // namespace airlock
