// `airlock plan --policy FILE`: the plan that would run, or the refusal, without running anything.
#include <cstdio>

#include "base/fs.h"
#include <fmt/ranges.h>

#include "cli/verbs.h"
#include "exec/planner.h"
#include "egress/door.h"

namespace airlock::cli {

void add_plan(CLI::App& app, Globals& g, Action& run) {
  auto* cmd = app.add_subcommand("plan", "print the execution plan for a policy on this host");
  static std::optional<std::string> policy_file, defaults, facts_file, workspace;
  cmd->add_option("--policy", policy_file,
                  "task policy (JSON); when absent, the repository's .airlock/policy.json, if any");
  cmd->add_option("--defaults", defaults, "worker default policy; when absent, ~/.config/airlock/policy.json, if any");
  cmd->add_option("--facts", facts_file, "plan for the host facts in this JSON file instead of probing");
  cmd->add_option("--workspace", workspace, "plan as `run --workspace DIR` would (overrides the policy's workspace)");
  cmd->add_flag("--json", g.json, "print JSON");
  cmd->callback([&g, &run] {
    run = [&g] {
      auto profile = parse_profile(g.profile);
      if (!profile) return refuse(profile.error(), g.json);
      // As `airlock run` finds the policy: discovered from the workspace when no flag names it.
      std::string cwd = absolute_path(".");
      auto layers = find_policy_layers(defaults, policy_file, workspace.value_or(cwd));
      // The state directory holds the host facts and the allowed repository policies.
      std::string state;
      if (!facts_file || (layers.task && layers.task->origin == "repository")) {
        auto resolved = resolve_state_dir(g.state_dir);
        if (!resolved) return refuse(resolved.error(), g.json);
        state = *resolved;
      }
      auto p = load_policy(layers, state);
      if (!p) return refuse(p.error(), g.json);
      plan::HostFacts facts;
      if (facts_file) {
        auto text = read_file(*facts_file);
        if (!text) return refuse(text.error(), g.json);
        auto j = parse_json(*text, Code::OptionInvalid, *facts_file);  // as host_facts_from_json refuses it
        if (!j) return refuse(j.error(), g.json);
        auto f = plan::host_facts_from_json(*j);
        if (!f) return refuse(f.error(), g.json);
        facts = *f;
      } else {
        facts = exec::facts_for(*p, exec::HostProbe(state));
      }
      // The plan a session of this policy would run under (its workspace's git targets included).
      std::optional<std::string> ws = workspace ? workspace : p->workspace ? p->workspace : cwd;
      auto planned = exec::plan_session(*p, facts, {*profile, ws ? absolute_path(*ws) : "", 0});
      if (!planned) return refuse(planned.error(), g.json);
      Json j = plan::to_json(*planned);
      if (g.json) {
        std::printf("%s\n", j.dump(2).c_str());
        return 0;
      }
      std::printf("executor   %s (level %d; the policy needs %d)\n", std::string(policy::to_string(planned->executor())).c_str(),
                  planned->tier(), planned->required_level);
      std::printf("why        %s\n", planned->why.c_str());
      for (const auto& c : planned->considered)
        std::printf("  tried    %-10s %s\n", std::string(policy::to_string(c.executor)).c_str(), c.reason.c_str());
      std::printf("policy     sha256 %s\n", planned->policy_digest.c_str());
      auto shown_tier = plan::sections_of(planned->confinement);
      if (const plan::LandlockPlan* landlock = shown_tier.landlock) {
        std::printf("landlock   floor ABI %d, measured ABI %d; tcp bind/connect %s; scoped signals %s, abstract unix %s\n",
                    landlock->abi_floor, landlock->abi_measured, landlock->restrict_tcp ? "denied" : "not restricted",
                    yes_no(landlock->scope_signal).c_str(), yes_no(landlock->scope_abstract_unix).c_str());
        for (const auto& r : landlock->fs_rules)
          std::printf("  %-9s %-8s %s%s\n", std::string(plan::to_string(r.access)).c_str(),
                      std::string(plan::to_string(r.anchor)).c_str(), r.path.c_str(), r.optional ? " (if present)" : "");
      }
      if (const plan::SeccompPlan* seccomp = shown_tier.seccomp)
        std::printf("seccomp    denies %zu syscalls (%s, ...); sockets: %s; ioctls denied: %s\n",
                    seccomp->denied_syscalls.size(),
                    fmt::format("{}", fmt::join(seccomp->denied_syscalls.begin(), seccomp->denied_syscalls.begin() + 6,
                                                ", ")).c_str(),
                    seccomp->no_sockets          ? "none (socketpair only)"
                    : seccomp->only_unix_sockets ? "AF_UNIX only"
                                                 : "any family",
                    fmt::format("{}", fmt::join(seccomp->denied_ioctls, ", ")).c_str());
      const auto& l = planned->limits;
      std::printf("limits     memory %llu MiB (RLIMIT_AS), cpu %llu s, processes %llu (%s), wall %llu ms\n",
                  static_cast<unsigned long long>(l.memory_bytes >> 20), static_cast<unsigned long long>(l.cpu_seconds),
                  static_cast<unsigned long long>(l.max_processes), std::string(plan::to_string(l.process_mechanism)).c_str(),
                  static_cast<unsigned long long>(l.wall_timeout_ms));
      const plan::DoorPlan* door = shown_tier.door;
      std::printf("network    %s\n", planned->host_network() ? "the host's (no isolation)"
                                      : door ? fmt::format("only the door at {} ({})", door->url(),
                                                           egress::describe_rules(door->rules))
                                                   .c_str()
                                             : "none");
      std::printf("view       %s; written back: %s\n", fmt::format("{}", fmt::join(planned->view_paths, ", ")).c_str(),
                  fmt::format("{}", fmt::join(planned->write_back_paths, ", ")).c_str());
      std::vector<std::string> shown;
      for (const auto& e : planned->protected_paths)
        shown.push_back(e.file_only         ? e.pattern + " (a file)"
                        : e.except.empty() ? e.pattern
                                           : e.pattern + " (all but objects, refs, logs, index, HEAD)");
      std::printf("protected  %s\n           read-only inside the sandbox, any change refused at write-back\n",
                  fmt::format("{}", fmt::join(shown, ", ")).c_str());
      std::printf("denied     %s (absent from the view, never written back)\n",
                  fmt::format("{}", fmt::join(planned->denied_names, ", ")).c_str());
      if (!planned->relaxations.empty())
        std::printf("relaxed    %s\n", fmt::format("{}", fmt::join(planned->relaxations, ", ")).c_str());
      return 0;
    };
  });
}

}  // namespace airlock::cli
