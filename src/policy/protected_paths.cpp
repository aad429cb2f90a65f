// Protected paths: the built-in list, policy patterns, and matching at any depth.
#include "policy/protected_paths.h"

#include <fnmatch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace airlock::policy {

// defaults/protected-paths.json as text, generated into the build (src/CMakeLists.txt).
extern const std::string_view kBuiltinProtectedPathsText;

namespace {

std::vector<std::string> components(std::string_view p) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string_view::npos) end = p.size();
    out.emplace_back(p.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool component_matches(const std::string& pattern, const std::string& name) {
  return ::fnmatch(pattern.c_str(), name.c_str(), FNM_CASEFOLD) == 0;
}

// Every j such that pattern[pi..] matches comps[ci..j).
void match_ends(const std::vector<std::string>& pat, size_t pi, const std::vector<std::string>& comps, size_t ci,
                std::vector<size_t>& ends) {
  if (pi == pat.size()) {
    ends.push_back(ci);
    return;
  }
  if (pat[pi] == "**") {
    for (size_t k = ci; k <= comps.size(); ++k) match_ends(pat, pi + 1, comps, k, ends);
    return;
  }
  if (ci < comps.size() && component_matches(pat[pi], comps[ci])) match_ends(pat, pi + 1, comps, ci + 1, ends);
}

std::vector<ProtectedPath> parse_defaults() {
  auto fatal = [](const std::string& why) {
    std::fprintf(stderr, "airlock: defaults/protected-paths.json is broken: %s\n", why.c_str());
    std::abort();
  };
  Json doc = Json::parse(kBuiltinProtectedPathsText, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || doc.value("schema_version", "") != "airlock.protected_paths.v1" ||
      !doc.contains("entries") || !doc["entries"].is_array())
    fatal("not an airlock.protected_paths.v1 document");
  std::vector<ProtectedPath> out;
  for (const auto& e : doc["entries"]) {
    if (!e.is_object() || !e.contains("pattern") || !e["pattern"].is_string()) fatal("an entry without a pattern");
    auto p = parse_protected_pattern(e["pattern"].get<std::string>(), "$.entries");
    if (!p) fatal(p.error().message);
    std::string type = e.value("type", "any");
    if (type != "any" && type != "file") fatal("type must be \"any\" or \"file\"");
    p->file_only = type == "file";
    p->why = e.value("why", "");
    // except, required, keep: each an array of patterns.
    for (auto [field, list] : {std::pair{"except", &p->except}, {"required", &p->required}, {"keep", &p->keep}}) {
      if (!e.contains(field)) continue;
      if (!e[field].is_array()) fatal(std::string(field) + " must be an array of patterns");
      for (const auto& x : e[field]) {
        if (!x.is_string()) fatal(std::string(field) + " must be an array of patterns");
        auto q = parse_protected_pattern(x.get<std::string>(), std::string("$.entries.") + field);
        if (!q) fatal(q.error().message);
        list->push_back(q->pattern);
      }
    }
    out.push_back(std::move(*p));
  }
  return out;
}

}  // namespace

const std::vector<ProtectedPath>& default_protected_paths() {
  static const std::vector<ProtectedPath> entries = parse_defaults();
  return entries;
}

Result<ProtectedPath> parse_protected_pattern(const std::string& pattern, const std::string& path) {
  auto bad = [&](std::string_view why) {
    return fail(Code::PolicyInvalid, fmt::format("{} is \"{}\": {}", path, pattern, why), {{"path", path}});
  };
  if (pattern.empty()) return bad("an empty pattern");
  if (pattern.size() > 4096) return bad("longer than 4096 bytes");
  if (pattern.find('\0') != std::string::npos) return bad("holds a NUL byte");
  if (pattern.front() == '/') return bad("a pattern is workspace-relative and matches at any depth");
  std::string p = pattern;
  if (p.size() > 1 && p.back() == '/') p.pop_back();  // ".vscode/" names the same as ".vscode"
  for (const auto& c : components(p)) {
    if (c.empty()) return bad("an empty component");
    if (c == "." || c == "..") return bad("\".\" and \"..\" are not components of a pattern");
  }
  if (p == "**") return bad("\"**\" alone would protect the whole workspace");
  return ProtectedPath{p, false, "named by the policy", {}, {}, {}};
}

namespace {

// Whether some pattern of `allowed` matches comps[from..] or one of its leading parts.
bool allowed_beneath(const std::vector<std::string>& allowed, const std::vector<std::string>& comps, size_t from) {
  std::vector<size_t> ends;
  for (const auto& a : allowed) {
    ends.clear();
    match_ends(components(a), 0, comps, from, ends);
    for (size_t end : ends)
      if (end > from) return true;
  }
  return false;
}

}  // namespace

std::optional<ProtectedPath> protected_by(const std::vector<ProtectedPath>& entries, std::string_view rel,
                                          bool is_dir) {
  if (rel.empty() || rel == ".") return std::nullopt;
  auto comps = components(rel);
  std::vector<size_t> ends;
  for (const auto& e : entries) {
    auto pat = components(e.pattern);
    for (size_t start = 0; start < comps.size(); ++start) {
      ends.clear();
      match_ends(pat, 0, comps, start, ends);
      for (size_t end : ends) {
        if (end == start) continue;  // "**" alone matched nothing
        // rel itself matched, or one of its ancestors (a directory: it has rel beneath it).
        bool matched_is_dir = end < comps.size() || is_dir;
        if (e.file_only && matched_is_dir) continue;
        if (!e.except.empty()) {
          // An allow-list entry: the directory itself is not protected, nor what the list names.
          if (end == comps.size() && is_dir) continue;
          if (end < comps.size() && allowed_beneath(e.except, comps, end)) continue;
        }
        return e;
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> kept_by(const std::vector<ProtectedPath>& entries, std::string_view rel) {
  auto comps = components(rel);
  std::vector<size_t> ends;
  for (const auto& e : entries) {
    if (e.keep.empty()) continue;
    auto pat = components(e.pattern);
    for (size_t start = 0; start < comps.size(); ++start) {
      ends.clear();
      match_ends(pat, 0, comps, start, ends);
      for (size_t end : ends)
        if (end > start && end < comps.size() && allowed_beneath(e.keep, comps, end)) {
          std::string root;
          for (size_t i = 0; i < end; ++i) root += (i ? "/" : "") + comps[i];
          return root;
        }
    }
  }
  return std::nullopt;
}

std::optional<ProtectedPath> required_by(const std::vector<ProtectedPath>& entries, std::string_view rel,
                                         std::string* root) {
  auto comps = components(rel);
  std::vector<size_t> ends, tail;
  for (const auto& e : entries) {
    if (e.required.empty()) continue;
    auto pat = components(e.pattern);
    for (size_t start = 0; start < comps.size(); ++start) {
      ends.clear();
      match_ends(pat, 0, comps, start, ends);
      for (size_t end : ends) {
        if (end <= start || end >= comps.size()) continue;
        for (const auto& r : e.required) {
          tail.clear();
          match_ends(components(r), 0, comps, end, tail);
          if (std::find(tail.begin(), tail.end(), comps.size()) == tail.end()) continue;
          root->clear();
          for (size_t i = 0; i < end; ++i) *root += (i ? "/" : "") + comps[i];
          return e;
        }
      }
    }
  }
  return std::nullopt;
}

std::string protected_root(const ProtectedPath& e, std::string_view rel) {
  auto comps = components(rel);
  auto pat = components(e.pattern);
  size_t best = 0;
  std::vector<size_t> ends;
  for (size_t start = 0; start < comps.size(); ++start) {
    ends.clear();
    match_ends(pat, 0, comps, start, ends);
    for (size_t end : ends)
      if (end > start && (best == 0 || end < best)) best = end;
  }
  std::string out;
  for (size_t i = 0; i < best; ++i) out += (i ? "/" : "") + comps[i];
  return out;
}

std::optional<ProtectedPath> protected_in_git_dir(const std::vector<ProtectedPath>& entries, std::string_view rel) {
  for (const auto& e : entries) {
    if (e.pattern != ".git" || e.except.empty()) continue;
    auto comps = components(rel);
    if (allowed_beneath(e.except, comps, 0)) return std::nullopt;
    return e;
  }
  return std::nullopt;
}

Json to_json(const std::vector<ProtectedPath>& entries) {
  Json j = Json::array();
  for (const auto& e : entries) {
    if (e.file_only)
      j.push_back({{"pattern", e.pattern}, {"type", "file"}});
    else if (!e.except.empty() && (!e.keep.empty() || !e.required.empty()))
      j.push_back({{"pattern", e.pattern}, {"except", e.except}, {"required", e.required}, {"keep", e.keep}});
    else if (!e.except.empty())
      j.push_back({{"pattern", e.pattern}, {"except", e.except}});
    else
      j.push_back(e.pattern);
  }
  return j;
}

}  // namespace airlock::policy
