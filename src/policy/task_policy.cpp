// Task policy airlock.task_policy.v1: strict parse with JSON paths, layering, tool resolution, digest.
#include "policy/task_policy.h"
#include "policy/strict_json.h"

#include <arpa/inet.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <limits>
#include <set>
#include <span>

#include "base/fs.h"
#include "base/hash.h"

namespace airlock::policy {

bool is_denied_name(const std::vector<std::string>& denied_names, std::string_view name) {
  std::string n(name);
  return std::any_of(denied_names.begin(), denied_names.end(),
                     [&](const std::string& d) { return ::fnmatch(d.c_str(), n.c_str(), FNM_CASEFOLD) == 0; });
}

TaskPolicy builtin_default() {
  TaskPolicy p;
  p.task_id = "default";
  p.readable = {"."};
  p.write_back_paths = {"."};
  p.denied_names.assign(std::begin(kDefaultDeniedNames), std::end(kDefaultDeniedNames));
  std::sort(p.denied_names.begin(), p.denied_names.end());
  p.protected_paths = default_protected_paths();
  p.tools = {Tool{.name = "shell", .argv = {"/bin/sh", "-c"}, .allow_args = true, .timeout_seconds = 300}};
  return p;
}

Result<ImageRef> parse_image_ref(std::string_view text, const std::string& path) {
  auto bad = [&](std::string why) {
    return fail(Code::PolicyInvalid, fmt::format("{} is \"{}\": {}", path, text, why), {{"path", path}});
  };
  auto at = text.rfind('@');
  if (at == std::string_view::npos)
    return bad("an image is named by digest, NAME@sha256:<64 hex digits>; a tag alone can be moved to other bytes");
  ImageRef r{std::string(text.substr(0, at)), std::string(text.substr(at + 1))};
  if (r.name.empty() || r.name.size() > 255) return bad("the image's name is empty or longer than 255 characters");
  for (char c : r.name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' || c == '/'))
      return bad("an image name uses only lower-case letters, digits, '.', '_', '-' and '/' (no tag: the digest "
                 "names the bytes)");
  // Each part starts and ends with a letter or digit (the OCI reference grammar).
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  for (size_t start = 0; start <= r.name.size();) {
    size_t end = r.name.find('/', start);
    if (end == std::string::npos) end = r.name.size();
    if (end == start || !alnum(r.name[start]) || !alnum(r.name[end - 1]))
      return bad("each part of an image name (between '/') starts and ends with a letter or digit");
    start = end + 1;
  }
  constexpr std::string_view kAlg = "sha256:";
  const std::string_view hex = std::string_view(r.digest).substr(std::min(r.digest.size(), kAlg.size()));
  if (!r.digest.starts_with(kAlg) || hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string_view::npos)
    return bad("the digest must be sha256:<64 lower-case hex digits>");
  return r;
}

Result<std::string> resolve_trusted(const std::string& program) {
  const Json facts = {{"program", program}, {"trusted_path", kTrustedPath}};
  if (program.empty()) return fail(Code::PolicyInvalid, "the program name is empty", facts);
  if (program.find('\0') != std::string::npos)
    return fail(Code::PolicyInvalid, "the program name contains a NUL byte", facts);

  auto usable = [](const std::string& path) {
    struct stat st {};
    // stat follows symlinks on purpose: /usr/bin/python3 is usually a link, and what
    // matters is that its target is a regular executable file.
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
  };

  if (program.front() == '/') {
    if (usable(program)) return program;
    return fail(Code::PolicyInvalid, fmt::format("{} is not an executable regular file", program), facts);
  }
  // A relative path with a slash would be resolved against whatever the current
  // directory happens to be at run time: not something a policy can pin down.
  if (program.find('/') != std::string::npos)
    return fail(Code::PolicyInvalid,
                fmt::format("\"{}\" is a relative path; give a bare name found on the trusted PATH "
                            "or an absolute path",
                            program),
                facts);

  std::string_view dirs = kTrustedPath;
  while (!dirs.empty()) {
    size_t colon = dirs.find(':');
    std::string_view dir = dirs.substr(0, colon);
    dirs = colon == std::string_view::npos ? std::string_view{} : dirs.substr(colon + 1);
    if (dir.empty()) continue;
    std::string candidate = fmt::format("{}/{}", dir, program);
    if (usable(candidate)) return candidate;
  }
  return fail(Code::PolicyInvalid,
              fmt::format("\"{}\" is not found on the trusted PATH {} (the caller's PATH is never "
                          "used; give an absolute path or install it there)",
                          program, kTrustedPath),
              facts);
}

namespace {

using Keys = std::span<const std::string_view>;

constexpr std::array<std::string_view, 21> kTopKeys = {
    "schema_version",  "task_id",      "workspace", "workload",     "tenancy",
    "executor",        "code_network", "egress",    "readable",     "write_back_paths",
    "read_only_paths", "tools",        "limits",    "denied_names", "agent",
    "confinement",     "protected_paths", "writable_protected_paths", "write_back", "machine_isolation",
    "image"};
constexpr std::array<std::string_view, 5> kAgentKeys = {"model", "resume", "continue", "executable_sha256",
                                                       "airlock_sha256"};
constexpr std::array<std::string_view, 2> kCodeNetworkKeys = {"mode", "rules"};
constexpr std::array<std::string_view, 5> kEgressKeys = {"host", "cidr", "ports", "schemes", "allow_private"};
constexpr std::array<std::string_view, 8> kToolKeys = {"name",     "argv", "allow_args",       "timeout_seconds",
                                                       "protocol", "env",  "max_output_bytes", "approval"};
constexpr std::array<std::string_view, 12> kLimitKeys = {
    "memory_mb",          "cpu_seconds",      "max_processes",      "command_timeout_seconds",
    "session_budget_seconds", "max_actions_per_minute", "max_read_bytes",   "max_write_bytes",
    "max_list_entries",   "max_response_bytes", "fetch_timeout_seconds", "max_output_bytes"};

}  // namespace

std::unexpected<Error> invalid(const std::string& path, std::string message) {
  return fail(Code::PolicyInvalid, std::move(message), {{"path", path}});
}

namespace {


// A short rendering of a value for messages: enough to recognise it, never a whole document.
std::string show(const Json& v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return fmt::format("{} ({})", s, v.type_name());
}

std::string join(Keys keys) {
  std::string out;
  for (auto k : keys) {
    if (!out.empty()) out += ", ";
    out += k;
  }
  return out;
}

}  // namespace

Result<void> require_object(const Json& v, const std::string& path) {
  if (!v.is_object()) return invalid(path, fmt::format("{} must be an object, got {}", path, show(v)));
  return {};
}

// Refuses the first key (in sorted order, so the report is deterministic) that is not allowed.
Result<void> check_keys(const Json& obj, const std::string& path, Keys allowed) {
  for (const auto& [key, _] : obj.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
      return invalid(path_join(path, key),
                     fmt::format("unknown key \"{}\" at {} (allowed: {})", key, path, join(allowed)));
  }
  return {};
}

Result<std::string> get_string(const Json& v, const std::string& path) {
  if (!v.is_string()) return invalid(path, fmt::format("{} must be a string, got {}", path, show(v)));
  std::string s = v.get<std::string>();
  // A NUL would be cut off by every C API the string later reaches.
  if (s.find('\0') != std::string::npos) return invalid(path, fmt::format("{} contains a NUL byte", path));
  return s;
}

Result<std::string> get_nonempty_string(const Json& v, const std::string& path) {
  auto s = TRY(get_string(v, path));
  if (s.empty()) return invalid(path, fmt::format("{} must not be empty", path));
  return s;
}

Result<bool> get_bool(const Json& v, const std::string& path) {
  if (!v.is_boolean()) return invalid(path, fmt::format("{} must be true or false, got {}", path, show(v)));
  return v.get<bool>();
}

namespace {

// A positive integer no larger than `max`. Floats (even 5.0), booleans and strings are
// refused: a limit written as "1024" or 1e3 is more likely a mistake than a wish.
Result<int64_t> get_positive_int(const Json& v, const std::string& path, int64_t max) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u == 0) return invalid(path, fmt::format("{} must be a positive integer, got 0", path));
    if (u > static_cast<uint64_t>(max))
      return invalid(path, fmt::format("{} is {}, more than the largest allowed ({})", path, u, max));
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {  // signed: only zero or negatives reach here
    int64_t i = v.get<int64_t>();
    if (i <= 0) return invalid(path, fmt::format("{} must be a positive integer, got {}", path, i));
    if (i > max)
      return invalid(path, fmt::format("{} is {}, more than the largest allowed ({})", path, i, max));
    return i;
  }
  return invalid(path, fmt::format("{} must be a positive integer, got {}", path, show(v)));
}

Result<int> get_positive_int32(const Json& v, const std::string& path) {
  return static_cast<int>(TRY(get_positive_int(v, path, std::numeric_limits<int>::max())));
}

}  // namespace

Result<std::vector<std::string>> get_string_array(const Json& v, const std::string& path) {
  if (!v.is_array())
    return invalid(path, fmt::format("{} must be an array of strings, got {}", path, show(v)));
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) out.push_back(TRY(get_string(v[i], path_join(path, i))));
  return out;
}

namespace {

template <typename E>
Result<E> get_enum(const Json& v, const std::string& path) {
  auto s = TRY(get_string(v, path));
  if (auto e = enum_from_string<E>(s)) return *e;
  return invalid(path, fmt::format("{} is \"{}\", which is not one of: {}", path, s, enum_name_list<E>()));
}

// An absolute host path, lexically normalised (no symlink resolution: the policy names
// paths, the kernel resolves them when rules are applied). Trailing slashes are dropped.
Result<std::string> get_absolute_path(const Json& v, const std::string& path) {
  auto s = TRY(get_nonempty_string(v, path));
  if (s.front() != '/') return invalid(path, fmt::format("{} must be an absolute path, got \"{}\"", path, s));
  std::string norm = std::filesystem::path(s).lexically_normal().string();
  while (norm.size() > 1 && norm.back() == '/') norm.pop_back();
  return norm;
}

// A workspace-relative prefix: "." is the whole workspace. Absolute paths and ".." are
// refused outright rather than normalised away: "src/../.." must never mean "above".
Result<std::string> get_relative_path(const Json& v, const std::string& path) {
  auto s = TRY(get_nonempty_string(v, path));
  if (s.front() == '/')
    return invalid(
        path, fmt::format("{} must be relative to the workspace, got the absolute path \"{}\"", path, s));
  std::vector<std::string_view> parts;
  std::string_view rest = s;
  while (!rest.empty()) {
    size_t slash = rest.find('/');
    std::string_view part = rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
    if (part == "..")
      return invalid(
          path, fmt::format("{} must stay inside the workspace: \"{}\" has a \"..\" component", path, s));
    if (part.empty() || part == ".") continue;
    parts.push_back(part);
  }
  if (parts.empty()) return std::string(".");
  std::string out;
  for (auto part : parts) {
    if (!out.empty()) out += '/';
    out += part;
  }
  return out;
}

Result<std::vector<std::string>> get_path_array(const Json& v, const std::string& path, bool absolute) {
  if (!v.is_array()) return invalid(path, fmt::format("{} must be an array of paths, got {}", path, show(v)));
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    std::string p = path_join(path, i);
    out.push_back(absolute ? TRY(get_absolute_path(v[i], p)) : TRY(get_relative_path(v[i], p)));
  }
  return out;
}

// Host names are compared case-insensitively by DNS, so they are stored lower-case;
// equal rules then give equal digests.
// "*" (any host) and "*.example.com" (any name under it) are wildcards; the addresses a
// wildcard admits are still checked (globally routable only, unless allow_private).
Result<std::string> parse_host(const Json& v, const std::string& path) {
  auto s = TRY(get_nonempty_string(v, path));
  if (s == "*") return s;
  std::string wildcard;
  if (s.starts_with("*.")) {
    wildcard = "*.";
    s = s.substr(2);
  }
  if (s.size() > 253) return invalid(path, fmt::format("{} is longer than a DNS name may be", path));
  for (char& c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
              c == '.' || c == '_';
    if (!ok)
      return invalid(path,
                     fmt::format("{} is \"{}\", which is not a host name (letters, digits, '-', '.', '_'); "
                                 "use \"cidr\" for address ranges",
                                 path, s));
    c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  }
  if (s.front() == '.' || s.front() == '-' || s.find("..") != std::string::npos)
    return invalid(path, fmt::format("{} is \"{}\", which is not a host name", path, s));
  if (s.back() == '.') s.pop_back();  // "example.com." and "example.com" are one name
  if (s.empty()) return invalid(path, fmt::format("{} is not a host name", path));
  return wildcard + s;
}

// "addr/len" with the address in its canonical text form. Host bits set below the prefix
// are refused: "10.1.2.3/8" is more likely a typo than a wish for all of 10/8.
Result<std::string> parse_cidr(const Json& v, const std::string& path) {
  auto s = TRY(get_nonempty_string(v, path));
  auto bad = [&](std::string_view why) {
    return invalid(
        path, fmt::format("{} is \"{}\", which is not a CIDR range (like 10.0.0.0/8 or fd00::/8): {}", path,
                          s, why));
  };
  size_t slash = s.find('/');
  if (slash == std::string::npos) return bad("no /prefix length");
  std::string addr = s.substr(0, slash);
  std::string len_text = s.substr(slash + 1);
  if (len_text.empty() || len_text.size() > 3 ||
      !std::all_of(len_text.begin(), len_text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return bad("the prefix length is not a number");
  int len = std::stoi(len_text);
  unsigned char bytes[16] = {};
  int family = addr.find(':') != std::string::npos ? AF_INET6 : AF_INET;
  if (::inet_pton(family, addr.c_str(), bytes) != 1) return bad("the address does not parse");
  int bits = family == AF_INET ? 32 : 128;
  if (len > bits) return bad(fmt::format("the prefix length is more than {}", bits));
  for (int b = len; b < bits; ++b)
    if (bytes[b / 8] & (0x80 >> (b % 8))) return bad("bits are set below the prefix length");
  char text[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(family, bytes, text, sizeof text);
  return fmt::format("{}/{}", text, len);
}

Result<EgressRule> parse_egress_rule(const Json& v, const std::string& path) {
  TRY(require_object(v, path));
  TRY(check_keys(v, path, kEgressKeys));
  EgressRule r;
  bool has_host = v.contains("host"), has_cidr = v.contains("cidr");
  if (has_host == has_cidr)
    return invalid(path, fmt::format("{} must name exactly one of \"host\" or \"cidr\"", path));
  if (has_host) r.host = TRY(parse_host(v["host"], path_join(path, "host")));
  if (has_cidr) r.cidr = TRY(parse_cidr(v["cidr"], path_join(path, "cidr")));

  std::string ports_path = path_join(path, "ports");
  if (!v.contains("ports")) return invalid(ports_path, fmt::format("{} is required", ports_path));
  const Json& ports = v["ports"];
  if (!ports.is_array() || ports.empty())
    return invalid(ports_path, fmt::format("{} must be a non-empty array of port numbers, got {}", ports_path,
                                           show(ports)));
  for (size_t i = 0; i < ports.size(); ++i)
    r.ports.push_back(static_cast<int>(TRY(get_positive_int(ports[i], path_join(ports_path, i), 65535))));

  // Without "schemes" a rule admits https only: the safe reading of an omission.
  r.schemes = {"https"};
  if (v.contains("schemes")) {
    std::string sp = path_join(path, "schemes");
    r.schemes = TRY(get_string_array(v["schemes"], sp));
    if (r.schemes.empty()) return invalid(sp, fmt::format("{} must not be empty", sp));
    for (size_t i = 0; i < r.schemes.size(); ++i)
      if (r.schemes[i] != "http" && r.schemes[i] != "https")
        return invalid(path_join(sp, i), fmt::format("{} is \"{}\", which is not one of: http, https",
                                                     path_join(sp, i), r.schemes[i]));
  }
  if (v.contains("allow_private"))
    r.allow_private = TRY(get_bool(v["allow_private"], path_join(path, "allow_private")));
  return r;
}

Result<std::vector<EgressRule>> parse_egress_rules(const Json& v, const std::string& path) {
  if (!v.is_array()) return invalid(path, fmt::format("{} must be an array of rules, got {}", path, show(v)));
  std::vector<EgressRule> out;
  for (size_t i = 0; i < v.size(); ++i) out.push_back(TRY(parse_egress_rule(v[i], path_join(path, i))));
  return out;
}

Result<void> parse_code_network(const Json& v, CodeNetwork& net) {
  const std::string path = "$.code_network";
  const std::string rules_path = path_join(path, "rules");
  TRY(require_object(v, path));
  TRY(check_keys(v, path, kCodeNetworkKeys));
  if (v.contains("mode")) {
    net.mode = TRY(get_enum<NetworkMode>(v["mode"], path_join(path, "mode")));
    // Switching the network off drops the lower layer's rules: "off" must mean off,
    // not "off, with rules waiting for someone to flip the mode back".
    if (net.mode == NetworkMode::Off) net.rules.clear();
  }
  if (v.contains("rules")) net.rules = TRY(parse_egress_rules(v["rules"], rules_path));
  if (net.mode == NetworkMode::Off && !net.rules.empty())
    return invalid(rules_path, fmt::format("{} is given but code_network.mode is \"off\"; set mode to "
                                           "\"allowlist\" or drop the rules",
                                           rules_path));
  if (net.mode == NetworkMode::Allowlist && net.rules.empty())
    return invalid(rules_path,
                   fmt::format("code_network.mode \"allowlist\" needs at least one rule in {}", rules_path));
  return {};
}

bool valid_tool_name(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

// Why a name cannot be on a tool's environment allow-list, if it cannot: what the executor sets
// itself is never taken from the host.
std::optional<std::string> env_name_problem(const std::string& name) {
  bool shaped = !name.empty() && !(name[0] >= '0' && name[0] <= '9') &&
                std::all_of(name.begin(), name.end(), [](char c) {
                  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
                });
  if (!shaped) return fmt::format("\"{}\" is not a variable name (letters, digits, '_')", name);
  for (const char* own : {"PATH", "HOME", "TMPDIR", "PWD"})
    if (name == own) return fmt::format("{} is set by the executor, never passed through", name);
  if (name.starts_with("AIRLOCK_")) return fmt::format("{}: AIRLOCK_ variables are airlock's own", name);
  return std::nullopt;
}

Result<Tool> parse_tool(const Json& v, const std::string& path, bool in_image) {
  TRY(require_object(v, path));
  TRY(check_keys(v, path, kToolKeys));
  Tool t;
  std::string name_path = path_join(path, "name");
  if (!v.contains("name")) return invalid(name_path, fmt::format("{} is required", name_path));
  t.name = TRY(get_nonempty_string(v["name"], name_path));
  if (!valid_tool_name(t.name))
    return invalid(
        name_path,
        fmt::format("{} is \"{}\"; a tool name uses only letters, digits, '_', '.', '-'", name_path, t.name));

  std::string argv_path = path_join(path, "argv");
  if (!v.contains("argv")) return invalid(argv_path, fmt::format("{} is required", argv_path));
  t.argv = TRY(get_string_array(v["argv"], argv_path));
  if (t.argv.empty()) return invalid(argv_path, fmt::format("{} must name a program", argv_path));

  // An absolute path, checked once, here: what runs and what the receipt records is exactly the
  // program the policy names, never a PATH lookup (the design's rule). A bare name is refused
  // with where the trusted PATH would find it, so the fix is one edit.
  std::string argv0_path = path_join(argv_path, size_t{0});
  if (!t.argv[0].starts_with('/')) {
    auto found = resolve_trusted(t.argv[0]);
    return invalid(argv0_path, fmt::format("{} is \"{}\": a tool's program must be an absolute path{}", argv0_path,
                                           t.argv[0],
                                           found ? fmt::format(" (here that is \"{}\")", *found) : std::string()));
  }
  // A policy that names an image runs its tools in that image: the program is the image's,
  // checked there when it runs (a program the image lacks exits 127), not on this host.
  auto resolved = in_image ? Result<std::string>(t.argv[0]) : resolve_trusted(t.argv[0]);
  if (!resolved) {
    Error e = std::move(resolved).error();
    e.facts["path"] = argv0_path;
    e.message = fmt::format("{}: {}", argv0_path, e.message);
    return std::unexpected(std::move(e));
  }
  t.argv[0] = *resolved;

  if (v.contains("allow_args")) t.allow_args = TRY(get_bool(v["allow_args"], path_join(path, "allow_args")));
  if (v.contains("timeout_seconds"))
    t.timeout_seconds = TRY(get_positive_int32(v["timeout_seconds"], path_join(path, "timeout_seconds")));
  if (v.contains("protocol")) t.protocol = TRY(get_enum<ToolProtocol>(v["protocol"], path_join(path, "protocol")));
  // A json tool takes its arguments as JSON on stdin; argv it has none to allow.
  if (t.protocol == ToolProtocol::Json && t.allow_args)
    return invalid(path_join(path, "allow_args"),
                   fmt::format("{} is true, but a tool with protocol \"json\" takes its arguments on stdin",
                               path_join(path, "allow_args")));
  if (v.contains("env")) {
    std::string env_path = path_join(path, "env");
    t.env = TRY(get_string_array(v["env"], env_path));
    for (size_t i = 0; i < t.env.size(); ++i)
      if (auto why = env_name_problem(t.env[i])) return invalid(path_join(env_path, i), fmt::format("{}: {}", path_join(env_path, i), *why));
  }
  if (v.contains("max_output_bytes"))
    t.max_output_bytes = TRY(get_positive_int(v["max_output_bytes"], path_join(path, "max_output_bytes"), int64_t{1} << 30));
  if (v.contains("approval")) t.approval = TRY(get_enum<ToolApproval>(v["approval"], path_join(path, "approval")));
  // The approval is bound to the call's canonical arguments and recorded on its ledger intent:
  // an argv tool has neither.
  if (t.approval == ToolApproval::Required && t.protocol != ToolProtocol::Json)
    return invalid(path_join(path, "approval"),
                   fmt::format("{} is \"required\", which only a tool with protocol \"json\" can be",
                               path_join(path, "approval")));
  return t;
}

Result<std::vector<Tool>> parse_tools(const Json& v, const std::string& path, bool in_image) {
  if (!v.is_array()) return invalid(path, fmt::format("{} must be an array of tools, got {}", path, show(v)));
  std::vector<Tool> out;
  std::set<std::string> seen;
  for (size_t i = 0; i < v.size(); ++i) {
    std::string tp = path_join(path, i);
    Tool t = TRY(parse_tool(v[i], tp, in_image));
    if (!seen.insert(t.name).second)
      return invalid(path_join(tp, "name"),
                     fmt::format("{} is \"{}\", a name already declared by an earlier tool",
                                 path_join(tp, "name"), t.name));
    out.push_back(std::move(t));
  }
  return out;
}

Result<void> parse_limits(const Json& v, Limits& l) {
  const std::string path = "$.limits";
  TRY(require_object(v, path));
  TRY(check_keys(v, path, kLimitKeys));
  auto field = [&](const char* key, int& out) -> Result<void> {
    if (v.contains(key)) out = TRY(get_positive_int32(v[key], path_join(path, key)));
    return {};
  };
  if (v.contains("memory_mb"))
    l.memory_mb = TRY(get_positive_int(v["memory_mb"], path_join(path, "memory_mb"),
                                       // memory_mb * 2^20 must still fit in 64 bits as bytes.
                                       std::numeric_limits<int64_t>::max() >> 20));
  TRY(field("cpu_seconds", l.cpu_seconds));
  TRY(field("max_processes", l.max_processes));
  TRY(field("command_timeout_seconds", l.command_timeout_seconds));
  TRY(field("session_budget_seconds", l.session_budget_seconds));
  TRY(field("max_actions_per_minute", l.max_actions_per_minute));
  TRY(field("max_list_entries", l.max_list_entries));
  TRY(field("fetch_timeout_seconds", l.fetch_timeout_seconds));
  auto bytes = [&](const char* key, int64_t& out) -> Result<void> {
    if (v.contains(key)) out = TRY(get_positive_int(v[key], path_join(path, key), int64_t{1} << 40));
    return {};
  };
  TRY(bytes("max_read_bytes", l.max_read_bytes));
  TRY(bytes("max_write_bytes", l.max_write_bytes));
  TRY(bytes("max_response_bytes", l.max_response_bytes));
  TRY(bytes("max_output_bytes", l.max_output_bytes));
  return {};
}

// A denied name is one path component: no '/', not "." or "..". The defaults are always in.
Result<std::vector<std::string>> parse_denied_names(const Json& v, const std::string& path) {
  auto names = TRY(get_string_array(v, path));
  for (size_t i = 0; i < names.size(); ++i) {
    const auto& n = names[i];
    if (n.empty() || n == "." || n == ".." || n.find('/') != std::string::npos || n.find('\0') != std::string::npos)
      return invalid(path_join(path, i),
                     fmt::format("{} is \"{}\", which is not a single file name", path_join(path, i), n));
  }
  for (auto d : kDefaultDeniedNames) names.emplace_back(d);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

// protected_paths adds patterns; writable_protected_paths takes away one in force, by its exact
// pattern (a named relaxation: the plan records it).
Result<void> parse_protected(const Json& doc, TaskPolicy& p) {
  if (doc.contains("protected_paths")) {
    auto patterns = TRY(get_string_array(doc["protected_paths"], "$.protected_paths"));
    for (size_t i = 0; i < patterns.size(); ++i) {
      auto e = TRY(parse_protected_pattern(patterns[i], path_join("$.protected_paths", i)));
      if (std::find(p.protected_paths.begin(), p.protected_paths.end(), e) == p.protected_paths.end())
        p.protected_paths.push_back(std::move(e));
    }
  }
  if (doc.contains("writable_protected_paths")) {
    auto patterns = TRY(get_string_array(doc["writable_protected_paths"], "$.writable_protected_paths"));
    for (size_t i = 0; i < patterns.size(); ++i) {
      std::string pattern = patterns[i];
      if (pattern.size() > 1 && pattern.back() == '/') pattern.pop_back();
      auto it = std::find_if(p.protected_paths.begin(), p.protected_paths.end(),
                             [&](const ProtectedPath& e) { return e.pattern == pattern; });
      bool already = std::find(p.writable_protected_paths.begin(), p.writable_protected_paths.end(), pattern) !=
                     p.writable_protected_paths.end();
      if (it == p.protected_paths.end() && !already)
        return invalid(path_join("$.writable_protected_paths", i),
                       fmt::format("{} is \"{}\", which is not a protected path in force (see `airlock plan`)",
                                   path_join("$.writable_protected_paths", i), patterns[i]));
      // Every entry of that pattern (".git" names the directory's allow-list and the file).
      std::erase_if(p.protected_paths, [&](const ProtectedPath& e) { return e.pattern == pattern; });
      if (!already) p.writable_protected_paths.push_back(pattern);
    }
  }
  return {};
}

Result<std::string> parse_task_id(const Json& v, const std::string& path) {
  auto s = TRY(get_nonempty_string(v, path));
  // Task ids end up in directory names, ledger rows and log lines: keep them plain.
  bool ok = s.size() <= 128 && std::all_of(s.begin(), s.end(), [](char c) {
              return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                     c == '.' || c == '-' || c == ':';
            });
  if (!ok || s == "." || s == "..")
    return invalid(
        path,
        fmt::format("{} is \"{}\"; a task id is at most 128 letters, digits, '_', '.', '-', ':'", path, s));
  return s;
}

Result<std::optional<std::string>> parse_workspace(const Json& v, const std::string& path) {
  // null clears a workspace set by a lower layer, and lets to_json's output parse again.
  if (v.is_null()) return std::optional<std::string>{};
  auto s = TRY(get_absolute_path(v, path));
  // The workspace is what write-back writes into: the whole file system is never one.
  if (s == "/") return invalid(path, fmt::format("{} must not be the root directory", path));
  return std::optional<std::string>{std::move(s)};
}

}  // namespace

Result<void> parse_agent(const Json& v, AgentPolicy& a) {
  TRY(require_object(v, "$.agent"));
  TRY(check_keys(v, "$.agent", kAgentKeys));
  if (v.contains("model"))
    a.model = v["model"].is_null() ? std::nullopt
                                   : std::optional(TRY(get_nonempty_string(v["model"], "$.agent.model")));
  if (v.contains("resume")) a.resume = TRY(get_bool(v["resume"], "$.agent.resume"));
  if (v.contains("continue")) a.continue_session = TRY(get_bool(v["continue"], "$.agent.continue"));
  for (auto [key, pin] : {std::pair{"executable_sha256", &a.executable_sha256}, std::pair{"airlock_sha256", &a.airlock_sha256}}) {
    if (!v.contains(key)) continue;
    std::string path = std::string("$.agent.") + key;
    std::string hex = TRY(get_nonempty_string(v[key], path));
    if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
      return invalid(path, fmt::format("{} must be a sha256: 64 lower-case hex digits", path));
    *pin = hex;
  }
  return {};
}

Result<TaskPolicy> parse_layer(const Json& doc, const TaskPolicy& base, bool worker_layer) {
  TRY(require_object(doc, "$"));
  if (!doc.contains("schema_version"))
    return invalid("$.schema_version", fmt::format("$.schema_version is required (\"{}\")", kSchemaVersion));
  auto version = TRY(get_string(doc["schema_version"], "$.schema_version"));
  if (version != kSchemaVersion)
    return invalid("$.schema_version", fmt::format("$.schema_version is \"{}\"; this build reads only \"{}\"",
                                                   version, kSchemaVersion));
  TRY(check_keys(doc, "$", kTopKeys));

  TaskPolicy p = base;
  if (doc.contains("task_id")) p.task_id = TRY(parse_task_id(doc["task_id"], "$.task_id"));
  if (doc.contains("workspace")) p.workspace = TRY(parse_workspace(doc["workspace"], "$.workspace"));
  if (doc.contains("workload")) p.workload = TRY(get_enum<Workload>(doc["workload"], "$.workload"));
  if (doc.contains("tenancy")) p.tenancy = TRY(get_enum<Tenancy>(doc["tenancy"], "$.tenancy"));
  if (doc.contains("executor")) p.executor = TRY(get_enum<ExecutorKind>(doc["executor"], "$.executor"));
  if (doc.contains("code_network")) TRY(parse_code_network(doc["code_network"], p.code_network));
  if (doc.contains("egress")) p.egress = TRY(parse_egress_rules(doc["egress"], "$.egress"));
  if (doc.contains("readable")) p.readable = TRY(get_path_array(doc["readable"], "$.readable", false));
  if (doc.contains("write_back_paths"))
    p.write_back_paths = TRY(get_path_array(doc["write_back_paths"], "$.write_back_paths", false));
  if (doc.contains("read_only_paths"))
    p.read_only_paths = TRY(get_path_array(doc["read_only_paths"], "$.read_only_paths", true));
  // Before the tools: a tool of a policy that names an image runs the image's program.
  if (doc.contains("image")) {
    if (doc["image"].is_null())
      p.image.reset();
    else
      p.image = TRY(parse_image_ref(TRY(get_nonempty_string(doc["image"], "$.image")))).text();
  }
  if (doc.contains("tools")) {
    p.tools = TRY(parse_tools(doc["tools"], "$.tools", p.image.has_value()));
    // A tool a lower layer holds for approval stays as that layer defined it: a layer above
    // (a posted session policy, the agent's own) may neither drop it nor redefine it.
    for (const auto& held : base.tools) {
      if (held.approval != ToolApproval::Required) continue;
      auto same = std::find_if(p.tools.begin(), p.tools.end(), [&](const Tool& t) { return t.name == held.name; });
      if (same == p.tools.end())
        p.tools.push_back(held);
      else if (to_json(*same) != to_json(held))
        return invalid("$.tools", fmt::format("the tool \"{}\" requires approval in a lower layer: a layer above may "
                                              "not redefine it (nor drop it)",
                                              held.name));
    }
  }
  if (doc.contains("limits")) TRY(parse_limits(doc["limits"], p.limits));
  if (doc.contains("denied_names")) p.denied_names = TRY(parse_denied_names(doc["denied_names"], "$.denied_names"));
  TRY(parse_protected(doc, p));
  if (doc.contains("agent")) TRY(parse_agent(doc["agent"], p.agent));
  if (doc.contains("confinement")) {
    // Checked before the layer question, so a wrong value is named as such wherever it is.
    p.confinement = TRY(get_enum<Confinement>(doc["confinement"], "$.confinement"));
    if (!worker_layer)
      return invalid("$.confinement",
                     "confinement is a worker setting: only the worker's defaults (--defaults) may set it");
  }
  if (doc.contains("write_back")) p.write_back = TRY(get_enum<WriteBack>(doc["write_back"], "$.write_back"));
  if (doc.contains("machine_isolation"))
    p.machine_isolation = TRY(get_enum<MachineIsolation>(doc["machine_isolation"], "$.machine_isolation"));
  return p;
}

Result<TaskPolicy> parse_layer_text(std::string_view text, const TaskPolicy& base,
                                    std::string_view source_name, bool worker_layer) {
  // Bounded, and duplicate keys refused: a policy two readers see differently is refused.
  auto parsed = parse_json(text, Code::PolicyInvalid, source_name);
  if (!parsed) return std::unexpected(std::move(parsed).error().fact("source", source_name));
  const Json& doc = *parsed;
  auto p = parse_layer(doc, base, worker_layer);
  if (!p) return std::unexpected(std::move(p).error().context(source_name).fact("source", source_name));
  return p;
}

Result<TaskPolicy> load_effective(const std::optional<std::string>& defaults_file,
                                  const std::optional<std::string>& task_file) {
  TaskPolicy p = builtin_default();
  for (const auto* file : {&defaults_file, &task_file}) {
    if (!*file) continue;
    const std::string& name = **file;
    auto text = read_file(name, Code::PolicyInvalid);
    if (!text) return std::unexpected(std::move(text).error().context("policy file").fact("source", name));
    p = TRY(parse_layer_text(*text, p, name, file == &defaults_file));
  }
  return p;
}

Json to_json(const EgressRule& r) {
  Json j = {{"ports", r.ports}, {"schemes", r.schemes}, {"allow_private", r.allow_private}};
  // Exactly one of host/cidr exists (parse guarantees it); only that one is written so
  // the output parses again as a policy.
  if (r.host) j["host"] = *r.host;
  if (r.cidr) j["cidr"] = *r.cidr;
  return j;
}

Json to_json(const std::vector<EgressRule>& rules) {
  Json j = Json::array();
  for (const auto& r : rules) j.push_back(to_json(r));
  return j;
}

Json to_json(const Tool& t) {
  Json tool = {{"name", t.name}, {"argv", t.argv}, {"allow_args", t.allow_args}, {"timeout_seconds", t.timeout_seconds}};
  // Written only when not the default: a policy that does not use them keeps the digest
  // it had before these fields existed (recorded receipts and plans name that digest).
  if (t.protocol != ToolProtocol::Argv) tool["protocol"] = to_string(t.protocol);
  if (!t.env.empty()) tool["env"] = t.env;
  if (t.max_output_bytes != Tool{}.max_output_bytes) tool["max_output_bytes"] = t.max_output_bytes;
  if (t.approval != ToolApproval::None) tool["approval"] = to_string(t.approval);
  return tool;
}

Json to_json(const TaskPolicy& p) {
  Json tools = Json::array();
  for (const auto& t : p.tools) tools.push_back(to_json(t));
  Json j = {
      {"schema_version", kSchemaVersion},
      {"task_id", p.task_id},
      {"workspace", p.workspace ? Json(*p.workspace) : Json(nullptr)},
      {"workload", to_string(p.workload)},
      {"tenancy", to_string(p.tenancy)},
      {"executor", to_string(p.executor)},
      {"code_network", {{"mode", to_string(p.code_network.mode)}, {"rules", to_json(p.code_network.rules)}}},
      {"egress", to_json(p.egress)},
      {"readable", p.readable},
      {"write_back_paths", p.write_back_paths},
      {"read_only_paths", p.read_only_paths},
      {"tools", tools},
      {"limits",
       {{"memory_mb", p.limits.memory_mb},
        {"cpu_seconds", p.limits.cpu_seconds},
        {"max_processes", p.limits.max_processes},
        {"command_timeout_seconds", p.limits.command_timeout_seconds},
        {"session_budget_seconds", p.limits.session_budget_seconds},
        {"max_actions_per_minute", p.limits.max_actions_per_minute},
        {"max_read_bytes", p.limits.max_read_bytes},
        {"max_write_bytes", p.limits.max_write_bytes},
        {"max_list_entries", p.limits.max_list_entries},
        {"max_response_bytes", p.limits.max_response_bytes},
        {"fetch_timeout_seconds", p.limits.fetch_timeout_seconds},
        {"max_output_bytes", p.limits.max_output_bytes}}},
      {"denied_names", p.denied_names},
  };
  // Written only when set, so that a policy without them keeps the digest it had before they
  // existed (recorded receipts and plans name that digest).
  if (p.agent != AgentPolicy{}) {
    j["agent"] = {{"model", p.agent.model ? Json(*p.agent.model) : Json(nullptr)},
                  {"resume", p.agent.resume},
                  {"continue", p.agent.continue_session}};
    if (p.agent.executable_sha256) j["agent"]["executable_sha256"] = *p.agent.executable_sha256;
    if (p.agent.airlock_sha256) j["agent"]["airlock_sha256"] = *p.agent.airlock_sha256;
  }
  if (p.confinement != Confinement::Engine) j["confinement"] = to_string(p.confinement);
  // The policy's own additions and removals (the built-in list is the plan's to show), written
  // only when there are any, so the output parses again as the same policy.
  std::vector<ProtectedPath> added;
  for (const auto& e : p.protected_paths) {
    const auto& d = default_protected_paths();
    if (std::find(d.begin(), d.end(), e) == d.end()) added.push_back(e);
  }
  if (!added.empty()) j["protected_paths"] = to_json(added);
  if (!p.writable_protected_paths.empty()) j["writable_protected_paths"] = p.writable_protected_paths;
  if (p.write_back != WriteBack::OnClose) j["write_back"] = to_string(p.write_back);
  if (p.machine_isolation != MachineIsolation::None) j["machine_isolation"] = to_string(p.machine_isolation);
  if (p.image) j["image"] = *p.image;
  return j;
}

std::string digest(const TaskPolicy& p) { return sha256_hex(canonical_json(to_json(p))); }

}  // namespace airlock::policy
