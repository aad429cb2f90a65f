// Agent profiles: strict parse, the built-in set, and the argument check that refuses bypasses.
#include "policy/agent_profile.h"

#include <algorithm>
#include <array>

#include "policy/strict_json.h"

namespace airlock::policy {

// agents/*.json as text, generated into the build (src/CMakeLists.txt).
extern const std::vector<std::string_view> kBuiltinAgentProfileTexts;

namespace {

constexpr std::array<std::string_view, 18> kProfileKeys = {
    "schema_version", "name",           "npm_package",     "executable",       "bypass_tokens",
    "bypass_values",  "model_flags",    "resume_flags",    "resume_commands",  "continue_flags",
    "credential_files", "credential_variables", "config_files", "config_dirs", "comment", "vendor_settings",
    "model_gateway", "engine_arguments"};
constexpr std::array<std::string_view, 8> kGatewayKeys = {"upstream",          "credential_header",
                                                          "credential_prefix", "placeholder_variables",
                                                          "base_url_variable", "base_url_path",
                                                          "arguments",         "paths"};
constexpr std::array<std::string_view, 3> kVendorKeys = {"network_off", "network_allowed", "reserved_flags"};
constexpr std::array<std::string_view, 2> kBypassValueKeys = {"flag", "values"};

Result<std::vector<std::string>> strings(const Json& doc, const char* key) {
  if (!doc.contains(key)) return invalid(fmt::format("$.{}", key), fmt::format("$.{} is required", key));
  auto v = TRY(get_string_array(doc[key], fmt::format("$.{}", key)));
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i].empty()) return invalid(path_join(fmt::format("$.{}", key), i), "an empty string matches nothing");
  return v;
}

// The value a flag carries at args[i]: `FLAG VALUE` (consumes the next argument) or `FLAG=VALUE`.
std::optional<std::string> flag_value(const std::vector<std::string>& args, size_t& i, const std::string& flag) {
  const std::string& a = args[i];
  if (a == flag) return i + 1 < args.size() ? std::optional(args[++i]) : std::optional(std::string());
  if (a.size() > flag.size() && a.starts_with(flag) && a[flag.size()] == '=') return a.substr(flag.size() + 1);
  return std::nullopt;
}

// `token` exactly, or `token=anything`: never a prefix or a substring.
bool is_flag(const std::string& arg, const std::string& token) {
  return arg == token || (arg.size() > token.size() && arg.starts_with(token) && arg[token.size()] == '=');
}

std::unexpected<Error> bypass(const AgentProfile& p, std::string message, Json facts) {
  facts["profile"] = p.name;
  return fail(Code::BypassRefused, std::move(message), std::move(facts));
}

}  // namespace

bool is_model_upstream(std::string_view up) {
  return up.starts_with("https://") && up.size() > 8 && up.substr(8).find_first_of("/?#@ ") == std::string_view::npos;
}

Result<AgentProfile> parse_agent_profile(const Json& doc) {
  TRY(require_object(doc, "$"));
  if (!doc.contains("schema_version") || TRY(get_string(doc["schema_version"], "$.schema_version")) !=
                                            kAgentProfileSchema)
    return invalid("$.schema_version", fmt::format("$.schema_version must be \"{}\"", kAgentProfileSchema));
  TRY(check_keys(doc, "$", kProfileKeys));
  AgentProfile p;
  for (auto [key, field] : {std::pair{"name", &p.name}, {"npm_package", &p.npm_package}, {"executable", &p.executable}}) {
    if (!doc.contains(key)) return invalid(fmt::format("$.{}", key), fmt::format("$.{} is required", key));
    *field = TRY(get_nonempty_string(doc[key], fmt::format("$.{}", key)));
  }
  p.bypass_tokens = TRY(strings(doc, "bypass_tokens"));
  p.model_flags = TRY(strings(doc, "model_flags"));
  p.resume_flags = TRY(strings(doc, "resume_flags"));
  p.resume_commands = TRY(strings(doc, "resume_commands"));
  p.continue_flags = TRY(strings(doc, "continue_flags"));
  p.credential_files = TRY(strings(doc, "credential_files"));
  p.credential_variables = TRY(strings(doc, "credential_variables"));
  p.config_files = TRY(strings(doc, "config_files"));
  p.config_dirs = TRY(strings(doc, "config_dirs"));
  if (p.model_flags.empty()) return invalid("$.model_flags", "a profile names at least one model flag");
  if (!doc.contains("vendor_settings")) return invalid("$.vendor_settings", "$.vendor_settings is required");
  TRY(require_object(doc["vendor_settings"], "$.vendor_settings"));
  TRY(check_keys(doc["vendor_settings"], "$.vendor_settings", kVendorKeys));
  p.vendor_settings.network_off = TRY(strings(doc["vendor_settings"], "network_off"));
  p.vendor_settings.network_allowed = TRY(strings(doc["vendor_settings"], "network_allowed"));
  p.vendor_settings.reserved_flags = TRY(strings(doc["vendor_settings"], "reserved_flags"));
  for (const auto* list : {&p.credential_files, &p.config_files, &p.config_dirs})
    for (const auto& f : *list)
      if (!f.starts_with("~/") && !f.starts_with("/"))
        return invalid("$", fmt::format("\"{}\" must be absolute or start with ~/", f));
  if (doc.contains("engine_arguments")) p.engine_arguments = TRY(strings(doc, "engine_arguments"));
  if (doc.contains("model_gateway")) {
    const Json& g = doc["model_gateway"];
    TRY(require_object(g, "$.model_gateway"));
    TRY(check_keys(g, "$.model_gateway", kGatewayKeys));
    AgentProfile::ModelGateway m;
    for (auto [key, field] : {std::pair{"upstream", &m.upstream}, {"credential_header", &m.credential_header}}) {
      if (!g.contains(key)) return invalid(fmt::format("$.model_gateway.{}", key), fmt::format("$.model_gateway.{} is required", key));
      *field = TRY(get_nonempty_string(g[key], fmt::format("$.model_gateway.{}", key)));
    }
    for (auto [key, field] : {std::pair{"credential_prefix", &m.credential_prefix}, {"base_url_path", &m.base_url_path},
                              {"base_url_variable", &m.base_url_variable}})
      if (g.contains(key)) *field = TRY(get_string(g[key], fmt::format("$.model_gateway.{}", key)));
    m.placeholder_variables = TRY(strings(g, "placeholder_variables"));
    if (g.contains("arguments")) m.arguments = TRY(strings(g, "arguments"));
    m.paths = TRY(strings(g, "paths"));
    for (size_t i = 0; i < m.paths.size(); ++i)
      if (m.paths[i].front() != '/')
        return invalid(path_join("$.model_gateway.paths", i), "a path starts with /");
    if (m.base_url_variable.empty() && m.arguments.empty())
      return invalid("$.model_gateway", "the gateway's URL reaches the agent by base_url_variable or arguments");
    if (!is_model_upstream(m.upstream))
      return invalid("$.model_gateway.upstream", "the upstream is https://host[:port], with no path");
    if (m.credential_header.find_first_of(": \r\nABCDEFGHIJKLMNOPQRSTUVWXYZ") != std::string::npos)
      return invalid("$.model_gateway.credential_header", "a lower-case header name");
    if (!m.base_url_path.empty() && m.base_url_path.front() != '/')
      return invalid("$.model_gateway.base_url_path", "empty, or a path that starts with /");
    if (m.placeholder_variables.empty())
      return invalid("$.model_gateway.placeholder_variables", "at least one variable gets the placeholder");
    p.model_gateway = std::move(m);
  }
  if (!doc.contains("bypass_values") || !doc["bypass_values"].is_array())
    return invalid("$.bypass_values", "$.bypass_values must be an array");
  for (size_t i = 0; i < doc["bypass_values"].size(); ++i) {
    const Json& v = doc["bypass_values"][i];
    std::string path = path_join("$.bypass_values", i);
    TRY(require_object(v, path));
    TRY(check_keys(v, path, kBypassValueKeys));
    if (!v.contains("flag") || !v.contains("values")) return invalid(path, fmt::format("{} needs flag and values", path));
    BypassValue b{TRY(get_nonempty_string(v["flag"], path + ".flag")), TRY(get_string_array(v["values"], path + ".values"))};
    if (b.values.empty()) return invalid(path + ".values", "at least one value");
    p.bypass_values.push_back(std::move(b));
  }
  return p;
}

Json to_json(const AgentProfile& p) {
  Json bv = Json::array();
  for (const auto& b : p.bypass_values) bv.push_back({{"flag", b.flag}, {"values", b.values}});
  Json gateway = nullptr;
  if (const auto& g = p.model_gateway)
    gateway = {{"upstream", g->upstream},
               {"credential_header", g->credential_header},
               {"credential_prefix", g->credential_prefix},
               {"placeholder_variables", g->placeholder_variables},
               {"base_url_variable", g->base_url_variable},
               {"base_url_path", g->base_url_path},
               {"arguments", g->arguments},
               {"paths", g->paths}};
  Json out = {{"schema_version", kAgentProfileSchema},
          {"name", p.name},
          {"npm_package", p.npm_package},
          {"executable", p.executable},
          {"bypass_tokens", p.bypass_tokens},
          {"bypass_values", bv},
          {"model_flags", p.model_flags},
          {"resume_flags", p.resume_flags},
          {"resume_commands", p.resume_commands},
          {"continue_flags", p.continue_flags},
          {"credential_files", p.credential_files},
          {"credential_variables", p.credential_variables},
          {"config_files", p.config_files},
          {"config_dirs", p.config_dirs},
          {"vendor_settings",
           {{"network_off", p.vendor_settings.network_off},
            {"network_allowed", p.vendor_settings.network_allowed},
            {"reserved_flags", p.vendor_settings.reserved_flags}}}};
  if (!gateway.is_null()) out["model_gateway"] = gateway;
  if (!p.engine_arguments.empty()) out["engine_arguments"] = p.engine_arguments;
  return out;
}

const std::vector<AgentProfile>& builtin_agent_profiles() {
  static const std::vector<AgentProfile> profiles = [] {
    std::vector<AgentProfile> out;
    for (auto text : kBuiltinAgentProfileTexts) {
      auto p = parse_agent_profile(Json::parse(text));
      // The profiles are part of the build and tested; a bad one is a bug, not an input error.
      if (!p) {
        std::fprintf(stderr, "airlock: built-in agent profile invalid: %s\n", p.error().message.c_str());
        std::abort();
      }
      out.push_back(std::move(*p));
    }
    return out;
  }();
  return profiles;
}

Result<AgentProfile> find_agent_profile(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& p : builtin_agent_profiles()) {
    if (p.name == name) return p;
    names.push_back(p.name);
  }
  return fail(Code::OptionInvalid, fmt::format("no agent profile \"{}\" (known: {})", name, fmt::join(names, ", ")),
              {{"profile", name}, {"known", names}});
}

Result<void> check_agent_args(const AgentProfile& p, const std::vector<std::string>& args, const AgentPolicy& wanted) {
  for (const auto& cmd : p.resume_commands) {
    std::vector<std::string> words;
    for (size_t at = 0, sp; at <= cmd.size(); at = sp + 1) {
      sp = cmd.find(' ', at);
      if (sp == std::string::npos) sp = cmd.size();
      words.push_back(cmd.substr(at, sp - at));
    }
    if (!wanted.resume && args.size() >= words.size() && std::equal(words.begin(), words.end(), args.begin()))
      return bypass(p, fmt::format("\"{}\" resumes an earlier session, and the policy does not ask for that", cmd),
                    {{"argument", cmd}, {"kind", "resume"}});
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    for (std::string_view t : kSharedBypassTokens) {
      // "--flag=value" tokens match exactly; a bare flag also as "--flag=anything".
      bool hit = t.find('=') != std::string_view::npos ? a == t : is_flag(a, std::string(t));
      if (hit)
        return bypass(p, fmt::format("{} switches an agent's own safety off (a known bypass, refused for every agent)", a),
                      {{"argument", a}, {"token", t}, {"kind", "bypass"}, {"list", "shared"}});
    }
    for (const auto& t : p.bypass_tokens)
      if (is_flag(a, t))
        return bypass(p, fmt::format("{} switches {}'s own safety off", a, p.name),
                      {{"argument", a}, {"token", t}, {"kind", "bypass"}});
    for (const auto& b : p.bypass_values) {
      size_t j = i;
      auto v = flag_value(args, j, b.flag);
      if (v && std::find(b.values.begin(), b.values.end(), *v) != b.values.end())
        return bypass(p, fmt::format("{} {} switches {}'s own safety off", b.flag, *v, p.name),
                      {{"argument", a}, {"token", b.flag}, {"value", *v}, {"kind", "bypass"}});
    }
    for (const auto& m : p.model_flags) {
      size_t j = i;
      auto v = flag_value(args, j, m);
      if (!v) continue;
      if (!wanted.model || *v != *wanted.model)
        return bypass(p,
                      wanted.model ? fmt::format("the agent is asked for model \"{}\"; the policy names \"{}\"", *v,
                                                 *wanted.model)
                                   : fmt::format("the agent is asked for model \"{}\"; the policy names none", *v),
                      {{"argument", a}, {"model", *v}, {"policy_model", wanted.model ? Json(*wanted.model) : Json()},
                       {"kind", "model"}});
      i = j;
    }
    for (const auto& r : p.resume_flags)
      if (!wanted.resume && is_flag(a, r))
        return bypass(p, fmt::format("{} resumes an earlier session, and the policy does not ask for that", a),
                      {{"argument", a}, {"kind", "resume"}});
    for (const auto& c : p.continue_flags)
      if (!wanted.continue_session && is_flag(a, c))
        return bypass(p, fmt::format("{} continues an earlier session, and the policy does not ask for that", a),
                      {{"argument", a}, {"kind", "continue"}});
  }
  return {};
}

Result<void> check_vendor_args(const AgentProfile& p, const std::vector<std::string>& args) {
  for (const auto& a : args)
    for (const auto& f : p.vendor_settings.reserved_flags)
      if (is_flag(a, f))
        return bypass(p,
                      fmt::format("{} would override the settings airlock composes for {}'s own sandbox under "
                                  "confinement vendor",
                                  a, p.name),
                      {{"argument", a}, {"token", f}, {"kind", "vendor_override"}});
  return {};
}

std::vector<std::string> credential_paths(const std::string& home) {
  std::vector<std::string> out;
  for (const auto& p : builtin_agent_profiles())
    for (const auto* list : {&p.credential_files, &p.config_files})
      for (const auto& f : *list) out.push_back(f.starts_with("~/") ? home + f.substr(1) : f);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::string> credential_variables() {
  std::vector<std::string> out;
  for (const auto& p : builtin_agent_profiles())
    out.insert(out.end(), p.credential_variables.begin(), p.credential_variables.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace airlock::policy
