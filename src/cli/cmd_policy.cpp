// `airlock policy check|show|explain|diff|allow`: a policy read, traced to its layers, asked about
// one action, compared with another, and (a repository's) trusted.
#include <limits.h>
#include <stdlib.h>

#include <cstdio>

#include "base/encoding.h"
#include "base/fs.h"
#include "base/hash.h"
#include "base/relpath.h"
#include "broker/path_guard.h"
#include "cli/verbs.h"
#include "egress/egress.h"
#include "exec/planner.h"

namespace airlock::cli {
namespace {

// The layers as `airlock run` finds them from --workspace (or the current directory).
struct LayerFlags {
  std::optional<std::string> policy_file, defaults, workspace;
  // `policy`: whether the verb takes --policy (allow names its file as FILE instead).
  void add(CLI::App* cmd, bool policy = true) {
    if (policy)
      cmd->add_option("--policy", policy_file, "task policy (JSON); when absent, the repository's .airlock/policy.json");
    cmd->add_option("--defaults", defaults, "worker default policy; when absent, ~/.config/airlock/policy.json");
    cmd->add_option("--workspace", workspace, "the directory `airlock run` would work on (default: the current one)");
  }
  std::string dir() const { return absolute_path(workspace.value_or(".")); }
  PolicyLayers layers() const { return find_policy_layers(defaults, policy_file, dir()); }
};

std::string layer_name(const PolicyLayer& l) { return l.origin + " " + l.file; }

// Every leaf of `j` (objects descended, arrays and scalars are leaves) with its path below `at`.
void leaves(const Json& j, const std::string& at, std::vector<std::pair<std::string, const Json*>>& out) {
  if (j.is_object() && !j.empty()) {
    for (const auto& [k, v] : j.items()) leaves(v, at + "." + k, out);
    return;
  }
  out.emplace_back(at, &j);
}

// Whether the layer document `doc` names the path `at` ("$.limits.memory_mb") or an object above it.
bool names(const Json& doc, const std::string& at) {
  const Json* j = &doc;
  size_t start = 2;  // after "$."
  while (start <= at.size()) {
    size_t end = at.find('.', start);
    if (end == std::string::npos) end = at.size();
    std::string key = at.substr(start, end - start);
    if (!j->is_object() || !j->contains(key)) return false;
    j = &(*j)[key];
    start = end + 1;
  }
  return true;
}

int show(Globals& g, const LayerFlags& f) {
  auto state = resolve_state_dir(g.state_dir);
  if (!state) return refuse(state.error(), g.json);
  PolicyLayers layers = f.layers();
  auto l = read_policy_layers(layers, *state);
  if (!l) return refuse(l.error(), g.json);
  // Each field's source: the last layer whose document names it ("built-in" when none does).
  std::vector<std::pair<std::string, Json>> docs;  // (layer, document)
  for (const auto* layer : {&layers.defaults, &layers.task}) {
    if (!*layer) continue;
    auto text = layer == &layers.task ? Result<std::string>(*l->task_text) : read_file((*layer)->file);
    if (!text) return refuse(text.error(), g.json);
    docs.emplace_back(layer_name(**layer), Json::parse(*text, nullptr, false));
  }
  Json effective = policy::to_json(l->policy);
  std::vector<std::pair<std::string, const Json*>> fields;
  leaves(effective, "$", fields);
  Json sources = Json::object();
  for (const auto& [at, v] : fields) {
    std::string from = "built-in";
    for (const auto& [name, doc] : docs)
      if (names(doc, at)) from = name;
    // These add to the built-in list and to each other, never replace them.
    if (at == "$.denied_names" || at == "$.protected_paths" || at == "$.writable_protected_paths") {
      from = "built-in";
      for (const auto& [name, doc] : docs)
        if (names(doc, at)) from += " + " + name;
    }
    sources[at] = from;
  }
  Json untrusted = Json::array();
  for (const auto& w : l->untrusted) untrusted.push_back(w.to_json());
  if (g.json) {
    Json ls = Json::array();
    for (const auto* layer : {&layers.defaults, &layers.task})
      if (*layer) ls.push_back({{"origin", (*layer)->origin}, {"file", (*layer)->file}});
    std::printf("%s\n", Json({{"policy", effective},
                              {"digest", policy::digest(l->policy)},
                              {"layers", ls},
                              {"sources", sources},
                              {"not_allowed", untrusted}})
                            .dump(-1, ' ', false, Json::error_handler_t::replace)
                            .c_str());
    return 0;
  }
  std::printf("layers: built-in");
  for (const auto& [name, doc] : docs) std::printf(" < %s", escape_for_terminal(name).c_str());
  std::printf("\n");
  for (const auto& [at, v] : fields)
    std::printf("%-36s %-40s %s\n", at.c_str() + 2,
                escape_for_terminal(v->dump(-1, ' ', false, Json::error_handler_t::replace)).c_str(),
                escape_for_terminal(sources[at].get<std::string>()).c_str());
  std::printf("sha256 %s\n", policy::digest(l->policy).c_str());
  if (!l->untrusted.empty()) {
    std::printf("not allowed yet: the repository's policy allows more than yours (`airlock policy allow` trusts it):\n");
    for (const auto& w : l->untrusted)
      std::printf("  %s: %s\n", w.field.c_str() + 2, escape_for_terminal(w.what).c_str());
  }
  return 0;
}

struct Verdict {
  bool allowed = false;
  std::string rule;  // the rule that decides, in words
  std::optional<Error> refusal;
};

// The broker's own check (PathGuard) over the plan's view rules, on the workspace.
Verdict explain_path(const plan::ExecutionPlan& plan, const std::string& workspace, const std::string& action,
                     const std::string& path) {
  auto guard = broker::PathGuard::open(workspace, plan.view_paths, plan.write_back_paths, plan.denied_names,
                                       plan.protected_paths);
  if (!guard) return {false, "", guard.error()};
  bool write = action == "write_file";
  auto rel = guard->check(path, write ? broker::Access::Write : broker::Access::Read);
  if (!rel) return {false, "", rel.error()};
  const auto& prefixes = write ? plan.write_back_paths : plan.view_paths;
  std::string prefix;
  for (const auto& p : prefixes)
    if (is_under(*rel, p)) prefix = p;
  return {true,
          fmt::format("{} is inside the {} prefix \"{}\" and neither a denied name nor{} protected", *rel,
                      write ? "write_back_paths" : "readable", prefix, write ? "" : " (for reading)"),
          std::nullopt};
}

Verdict explain_fetch(const policy::TaskPolicy& p, const std::string& url, std::string& note) {
  // Judged as `http_fetch` would be, except that a name that does not resolve here is taken to
  // resolve to a public address: the question is the policy's answer, not this host's DNS.
  auto system = egress::system_resolver();
  egress::Resolver resolve = [&](const std::string& host) -> Result<std::vector<egress::IpAddress>> {
    auto got = system(host);
    if (got && !got->empty()) return got;
    note = fmt::format("{} does not resolve here; judged as if it resolved to a public address", host);
    return std::vector<egress::IpAddress>{*egress::parse_literal("8.8.8.8")};
  };
  auto admitted = egress::admit(p.egress, url, resolve);
  if (!admitted) return {false, "", admitted.error()};
  return {true, fmt::format("egress rule {}: {}", admitted->rule, policy::to_json(p.egress[admitted->rule]).dump()),
          std::nullopt};
}

Verdict explain_run(const policy::TaskPolicy& p, const plan::ExecutionPlan& plan) {
  std::string where = fmt::format("runs confined on the {} tier (level {}) of this host", 
                                  policy::to_string(plan.executor()), plan.tier());
  std::string net = p.code_network.mode == policy::NetworkMode::Off
                        ? "code has no network: anything it connects to (a git push, a package download) fails"
                        : fmt::format("code reaches only {}", policy::to_json(p.code_network.rules).dump());
  if (plan.host_network()) net = "code has the host's network (the host tier confines nothing)";
  return {true, fmt::format("a command {}; {}", where, net), std::nullopt};
}

int explain(Globals& g, const LayerFlags& f, const std::vector<std::string>& words) {
  static const std::vector<std::string> kActions = {"read_file", "write_file", "list_dir", "fetch", "run"};
  const std::string& action = words[0];
  if (std::find(kActions.begin(), kActions.end(), action) == kActions.end() || words.size() < 2 ||
      (action != "run" && words.size() != 2))
    return refuse({Code::OptionInvalid,
                   fmt::format("cannot explain \"{}\": say read_file PATH, write_file PATH, list_dir PATH, fetch URL "
                               "or run COMMAND [ARGS…]",
                               escape_for_terminal(action)),
                   {{"action", action}}},
                  g.json);
  auto profile = parse_profile(g.profile);
  if (!profile) return refuse(profile.error(), g.json);
  auto start = prepare_session(g, f.defaults, f.policy_file, false, f.dir());
  if (!start) return refuse(start.error(), g.json);
  std::string workspace = absolute_path(f.workspace ? *f.workspace : start->policy.workspace.value_or("."));
  auto planned = exec::plan_session(start->policy, start->facts, {*profile, workspace, 0});
  if (!planned) return refuse(planned.error(), g.json);
  std::string note;
  Verdict v = action == "fetch" ? explain_fetch(start->policy, words[1], note)
              : action == "run" ? explain_run(start->policy, *planned)
                                : explain_path(*planned, workspace, action, words[1]);
  if (g.json) {
    Json j = {{"action", words}, {"allowed", v.allowed}, {"policy_digest", planned->policy_digest}};
    if (v.allowed) j["rule"] = v.rule;
    else j["refused"] = v.refusal->to_json();
    if (!note.empty()) j["note"] = note;
    std::printf("%s\n", j.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
  } else if (v.allowed) {
    std::printf("allowed: %s\n", escape_for_terminal(v.rule).c_str());
  } else {
    std::printf("refused: %s: %s\n", std::string(to_name(v.refusal->code)).c_str(),
                escape_for_terminal(v.refusal->message).c_str());
  }
  if (!note.empty() && !g.json) std::printf("note: %s\n", escape_for_terminal(note).c_str());
  return v.allowed ? 0 : 1;
}

int diff(Globals& g, const std::optional<std::string>& defaults, const std::string& a, const std::string& b) {
  auto pa = load_policy(defaults, a);
  if (!pa) return refuse(pa.error(), g.json);
  auto pb = load_policy(defaults, b);
  if (!pb) return refuse(pb.error(), g.json);
  auto wider = policy::widenings(*pa, *pb);
  if (g.json) {
    Json j = Json::array();
    for (const auto& w : wider) j.push_back(w.to_json());
    std::printf("%s\n", Json({{"a", a}, {"b", b}, {"a_allows_more", j}}).dump(-1, ' ', false,
                                                                             Json::error_handler_t::replace).c_str());
  } else if (wider.empty()) {
    std::printf("%s allows nothing that %s does not\n", escape_for_terminal(a).c_str(), escape_for_terminal(b).c_str());
  } else {
    std::printf("%s allows what %s does not:\n", escape_for_terminal(a).c_str(), escape_for_terminal(b).c_str());
    for (const auto& w : wider)
      std::printf("  %s: %s\n", w.field.c_str() + 2, escape_for_terminal(w.what).c_str());
  }
  return wider.empty() ? 0 : 1;
}

int allow(Globals& g, const LayerFlags& f, const std::optional<std::string>& file) {
  auto state = resolve_state_dir(g.state_dir);
  if (!state) return refuse(state.error(), g.json);
  std::optional<std::string> target = file ? std::optional(absolute_path(*file)) : repository_policy(f.dir());
  if (file) {
    char buf[PATH_MAX];
    if (::realpath(file->c_str(), buf)) target = buf;  // the file itself, wherever a link on the way leads
  }
  if (!target)
    return refuse({Code::NotFound,
                   fmt::format("no repository policy (.airlock/policy.json) is found from {}", f.dir()),
                   {{"directory", f.dir()}}},
                  g.json);
  PolicyLayers layers = find_policy_layers(f.defaults, std::nullopt, f.dir());
  layers.task = PolicyLayer{"repository", *target};
  auto l = read_policy_layers(layers, *state);  // a policy that does not parse is not allowed
  if (!l) return refuse(l.error(), g.json);
  if (auto r = allow_repository_policy(*state, *target, *l->task_text); !r) return refuse(r.error(), g.json);
  auto wider = policy::widenings(l->policy, l->below_task);
  if (g.json) {
    Json j = Json::array();
    for (const auto& w : wider) j.push_back(w.to_json());
    std::printf("%s\n", Json({{"allowed", *target}, {"sha256", sha256_hex(*l->task_text)}, {"allows_more", j}})
                            .dump(-1, ' ', false, Json::error_handler_t::replace)
                            .c_str());
    return 0;
  }
  std::printf("allowed %s (sha256 %s): any change to it must be allowed again\n", escape_for_terminal(*target).c_str(),
              sha256_hex(*l->task_text).c_str());
  for (const auto& w : wider) std::printf("  %s: %s\n", w.field.c_str() + 2, escape_for_terminal(w.what).c_str());
  return 0;
}

}  // namespace

void add_policy(CLI::App& app, Globals& g, Action& run) {
  auto* policy = app.add_subcommand("policy", "work with task policies");
  policy->require_subcommand(1);
  auto* check = policy->add_subcommand("check", "parse a task policy strictly and print the effective policy");
  static std::string file;
  static std::optional<std::string> defaults;
  check->add_option("FILE", file, "task policy (JSON)")->required();
  check->add_option("--defaults", defaults, "worker default policy layered below FILE");
  check->add_flag("--json", g.json, "print JSON");
  check->callback([&g, &run] {
    run = [&g] {
      auto p = load_policy(defaults, file);
      if (!p) return refuse(p.error(), g.json);
      std::string digest = policy::digest(*p);
      if (g.json) {
        std::printf("%s\n", Json({{"digest", digest}, {"policy", policy::to_json(*p)}}).dump(2).c_str());
      } else {
        std::printf("%s\n", policy::to_json(*p).dump(2).c_str());
        std::printf("policy ok: sha256 %s\n", digest.c_str());
      }
      return 0;
    };
  });

  static LayerFlags flags;
  auto* show_cmd = policy->add_subcommand(
      "show", "the effective policy `airlock run` would use here, each field with the layer it came from");
  flags.add(show_cmd);
  show_cmd->add_flag("--json", g.json, "print JSON");
  show_cmd->callback([&g, &run] { run = [&g] { return show(g, flags); }; });

  static std::vector<std::string> words;
  auto* explain_cmd = policy->add_subcommand(
      "explain", "whether an action would be allowed here, and the rule that decides (exit 0 allowed, 1 refused)");
  flags.add(explain_cmd);
  explain_cmd->add_flag("--json", g.json, "print JSON");
  explain_cmd->positionals_at_end();
  explain_cmd
      ->add_option("ACTION", words,
                   "read_file PATH | write_file PATH | list_dir PATH | fetch URL | run COMMAND [ARGS…]")
      ->required();
  explain_cmd->callback([&g, &run] { run = [&g] { return explain(g, flags, words); }; });

  static std::string a, b;
  auto* diff_cmd = policy->add_subcommand("diff", "what policy A allows that policy B does not (exit 1 when anything)");
  diff_cmd->add_option("A", a, "task policy (JSON)")->required();
  diff_cmd->add_option("B", b, "task policy (JSON)")->required();
  diff_cmd->add_option("--defaults", defaults, "worker default policy layered below both");
  diff_cmd->add_flag("--json", g.json, "print JSON");
  diff_cmd->callback([&g, &run] { run = [&g] { return diff(g, defaults, a, b); }; });

  static std::optional<std::string> allow_file;
  auto* allow_cmd = policy->add_subcommand(
      "allow", "trust this version of a repository's policy that allows more than your own (as direnv allow)");
  flags.add(allow_cmd, false);
  allow_cmd->add_option("FILE", allow_file, "the policy file (default: the repository's .airlock/policy.json)");
  allow_cmd->add_flag("--json", g.json, "print JSON");
  allow_cmd->callback([&g, &run] { run = [&g] { return allow(g, flags, allow_file); }; });
}

}  // namespace airlock::cli
