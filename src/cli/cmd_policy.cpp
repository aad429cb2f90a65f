// `airlock policy check FILE`: the effective policy and its digest, or the refusal.
#include <cstdio>

#include "cli/verbs.h"

namespace airlock::cli {

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
}

}  // namespace airlock::cli
