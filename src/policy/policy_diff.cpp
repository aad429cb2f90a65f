// What one effective policy allows that another does not.
#include "policy/policy_diff.h"

#include <algorithm>

#include "base/relpath.h"

namespace airlock::policy {
namespace {

std::string list(const std::vector<std::string>& v) { return Json(v).dump(); }

std::string describe(const EgressRule& r) {
  std::string who = r.host ? *r.host : r.cidr.value_or("?");
  std::string s = fmt::format("{} ports {} schemes {}", who, Json(r.ports).dump(), Json(r.schemes).dump());
  if (r.allow_private) s += " (private addresses allowed)";
  return s;
}

bool same_rule(const EgressRule& x, const EgressRule& y) { return to_json(x) == to_json(y); }

// Rules of `a` that no rule of `b` equals.
void rules_beyond(const std::vector<EgressRule>& a, const std::vector<EgressRule>& b, const std::string& field,
                  const std::string& verb, std::vector<Widening>& out) {
  for (const auto& r : a)
    if (std::none_of(b.begin(), b.end(), [&](const auto& q) { return same_rule(r, q); }))
      out.push_back({field, fmt::format("{} {}", verb, describe(r))});
}

// Prefixes of `a` (paths, "." for all) that no prefix of `b` covers.
void prefixes_beyond(const std::vector<std::string>& a, const std::vector<std::string>& b, const std::string& field,
                     const std::string& verb, std::vector<Widening>& out) {
  for (const auto& p : a)
    if (!under_any(p, b)) out.push_back({field, fmt::format("{} {}", verb, p)});
}

template <typename T>
void more(T a, T b, const std::string& field, std::vector<Widening>& out) {
  if (a > b) out.push_back({field, fmt::format("{} (not {})", a, b)});
}

}  // namespace

std::vector<Widening> widenings(const TaskPolicy& a, const TaskPolicy& b) {
  std::vector<Widening> out;
  if (a.workspace != b.workspace)
    out.push_back({"$.workspace", fmt::format("works on {} (not {})", a.workspace.value_or("no workspace"),
                                              b.workspace.value_or("no workspace"))});
  if (a.workload == Workload::TrustedToolchain && b.workload == Workload::UntrustedCode)
    out.push_back({"$.workload", "treats the code as a trusted toolchain (not untrusted code)"});
  if (a.tenancy == Tenancy::SingleTenant && b.tenancy == Tenancy::MultiTenant)
    out.push_back({"$.tenancy", "single tenant (not multi-tenant)"});
  if (a.executor != b.executor)
    out.push_back({"$.executor", fmt::format("executor {} (not {})", to_string(a.executor), to_string(b.executor))});
  if (a.code_network.mode == NetworkMode::Allowlist)
    rules_beyond(a.code_network.rules, b.code_network.mode == NetworkMode::Allowlist ? b.code_network.rules
                                                                                     : std::vector<EgressRule>{},
                 "$.code_network", "lets code connect to", out);
  rules_beyond(a.egress, b.egress, "$.egress", "allows fetches from", out);
  prefixes_beyond(a.readable, b.readable, "$.readable", "reads", out);
  prefixes_beyond(a.write_back_paths, b.write_back_paths, "$.write_back_paths", "writes back", out);
  prefixes_beyond(a.read_only_paths, b.read_only_paths, "$.read_only_paths", "lets code read the host path", out);
  for (const auto& n : b.denied_names)
    if (std::find(a.denied_names.begin(), a.denied_names.end(), n) == a.denied_names.end())
      out.push_back({"$.denied_names", fmt::format("does not deny the name {}", n)});
  for (const auto& e : b.protected_paths)
    if (std::find(a.protected_paths.begin(), a.protected_paths.end(), e) == a.protected_paths.end())
      out.push_back({"$.protected_paths", fmt::format("does not protect {}", e.pattern)});
  for (const auto& t : a.tools) {
    auto same = std::find_if(b.tools.begin(), b.tools.end(), [&](const Tool& u) { return u.name == t.name; });
    if (same == b.tools.end()) {
      out.push_back({"$.tools", fmt::format("declares the tool {} ({})", t.name, list(t.argv))});
      continue;
    }
    std::string f = "$.tools." + t.name;
    if (t.argv != same->argv)
      out.push_back({f + ".argv", fmt::format("runs {} (not {})", list(t.argv), list(same->argv))});
    if (t.allow_args && !same->allow_args) out.push_back({f + ".allow_args", "accepts arguments"});
    if (t.protocol != same->protocol)
      out.push_back({f + ".protocol", fmt::format("protocol {}", to_string(t.protocol))});
    for (const auto& v : t.env)
      if (std::find(same->env.begin(), same->env.end(), v) == same->env.end())
        out.push_back({f + ".env", fmt::format("passes the host variable {}", v)});
    more(t.timeout_seconds, same->timeout_seconds, f + ".timeout_seconds", out);
    more(t.max_output_bytes, same->max_output_bytes, f + ".max_output_bytes", out);
  }
  const Limits &la = a.limits, &lb = b.limits;
  more(la.memory_mb, lb.memory_mb, "$.limits.memory_mb", out);
  more(la.cpu_seconds, lb.cpu_seconds, "$.limits.cpu_seconds", out);
  more(la.max_processes, lb.max_processes, "$.limits.max_processes", out);
  more(la.command_timeout_seconds, lb.command_timeout_seconds, "$.limits.command_timeout_seconds", out);
  more(la.session_budget_seconds, lb.session_budget_seconds, "$.limits.session_budget_seconds", out);
  more(la.max_actions_per_minute, lb.max_actions_per_minute, "$.limits.max_actions_per_minute", out);
  more(la.max_read_bytes, lb.max_read_bytes, "$.limits.max_read_bytes", out);
  more(la.max_write_bytes, lb.max_write_bytes, "$.limits.max_write_bytes", out);
  more(la.max_list_entries, lb.max_list_entries, "$.limits.max_list_entries", out);
  more(la.max_response_bytes, lb.max_response_bytes, "$.limits.max_response_bytes", out);
  more(la.fetch_timeout_seconds, lb.fetch_timeout_seconds, "$.limits.fetch_timeout_seconds", out);
  more(la.max_output_bytes, lb.max_output_bytes, "$.limits.max_output_bytes", out);
  const AgentPolicy &ga = a.agent, &gb = b.agent;
  if (gb.model && ga.model != gb.model)
    out.push_back({"$.agent.model", fmt::format("model {} (not {})", ga.model.value_or("any"), *gb.model)});
  if (ga.resume && !gb.resume) out.push_back({"$.agent.resume", "lets the agent resume a session"});
  if (ga.continue_session && !gb.continue_session)
    out.push_back({"$.agent.continue", "lets the agent continue a session"});
  if (gb.executable_sha256 && ga.executable_sha256 != gb.executable_sha256)
    out.push_back({"$.agent.executable_sha256", "does not pin the agent's executable to the same sha256"});
  if (gb.airlock_sha256 && ga.airlock_sha256 != gb.airlock_sha256)
    out.push_back({"$.agent.airlock_sha256", "does not pin airlock to the same sha256"});
  if (a.confinement == Confinement::Vendor && b.confinement == Confinement::Engine)
    out.push_back({"$.confinement", "leaves an agent run to the agent's own sandbox (vendor)"});
  if (a.machine_isolation < b.machine_isolation)
    out.push_back({"$.machine_isolation", fmt::format("asks a machine for {} isolation (not {})",
                                                      to_string(a.machine_isolation), to_string(b.machine_isolation))});
  if (a.write_back != b.write_back)
    out.push_back({"$.write_back", fmt::format("writes back {} (not {})", to_string(a.write_back),
                                               to_string(b.write_back))});
  return out;
}

}  // namespace airlock::policy
