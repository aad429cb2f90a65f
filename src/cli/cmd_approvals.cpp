// `airlock approvals`, `airlock approve ID`, `airlock deny ID`: the person's side of a held call
// (broker/approvals.h), reading and answering the requests in the state directory.
#include <unistd.h>

#include <cstdio>

#include "base/clock.h"
#include "broker/approvals.h"
#include "cli/verbs.h"

namespace airlock::cli {
namespace {

std::string utc(int64_t ms) { return utc_text(ms * 1000); }

int list_verb(Globals& g, bool all) {
  auto state = resolve_state_dir(g.state_dir);
  if (!state) return refuse(state.error(), g.json);
  auto list = broker::ApprovalStore(*state).list(!all);
  if (!list) return refuse(list.error(), g.json);
  if (g.json) {
    Json out = Json::array();
    for (const auto& a : *list) out.push_back(a.to_json());
    std::printf("%s\n", Json{{"approvals", out}}.dump().c_str());
    return 0;
  }
  if (list->empty()) std::printf("no %sapproval requests\n", all ? "" : "pending ");
  for (const auto& a : *list) {
    std::printf(
        "%s  %-8s tool %s, run %s, session %s, requested %s, %s %s\n", a.id.c_str(), a.status.c_str(),
        a.binding.tool.c_str(), a.binding.run_id.c_str(), a.session.c_str(), utc(a.requested_at).c_str(),
        a.status == "pending" || a.status == "approved" ? "expires" : "was due", utc(a.expires_at).c_str());
    // ASCII only: a control or bidi character in the arguments is shown escaped, never obeyed.
    std::printf("    args %s (sha256 %s)\n", a.args.dump(-1, ' ', true, Json::error_handler_t::replace).c_str(),
                a.binding.args_sha256.c_str());
    std::printf("    runs %s\n",
                a.tool_definition.value("argv", Json::array()).dump(-1, ' ', true, Json::error_handler_t::replace).c_str());
  }
  return 0;
}

int decide_verb(Globals& g, const std::string& id, bool approve, uint32_t attempts, int64_t expires_in) {
  auto state = resolve_state_dir(g.state_dir);
  if (!state) return refuse(state.error(), g.json);
  auto a = broker::ApprovalStore(*state).decide(id, approve, attempts, expires_in * 1000,
                                                fmt::format("cli (uid {})", ::getuid()));
  if (!a) return refuse(a.error(), g.json);
  if (g.json) {
    std::printf("%s\n", a->to_json().dump().c_str());
  } else if (approve) {
    std::printf("approved %s: tool %s in run %s with these arguments, for %u dispatch(es) until %s\n",
                a->id.c_str(), a->binding.tool.c_str(), a->binding.run_id.c_str(), a->attempts,
                utc(a->expires_at).c_str());
  } else {
    std::printf("denied %s: tool %s in run %s will not run with these arguments\n", a->id.c_str(),
                a->binding.tool.c_str(), a->binding.run_id.c_str());
  }
  return 0;
}

}  // namespace

void add_approvals(CLI::App& app, Globals& g, Action& run) {
  static bool all = false;
  auto* list = app.add_subcommand("approvals", "list the calls held for a person's approval");
  list->add_flag("--all", all, "every request, answered and expired ones too");
  list->add_flag("--json", g.json, "print JSON");
  list->callback([&g, &run] { run = [&g] { return list_verb(g, all); }; });

  static std::string approve_id, deny_id;
  static uint32_t attempts = 1;
  static int64_t expires_in = broker::kApprovalTtlMs / 1000;
  auto* approve =
      app.add_subcommand("approve", "approve one held call: that tool, run and arguments, nothing else");
  approve->add_option("id", approve_id, "the approval request's id (`airlock approvals` lists them)")
      ->required();
  approve->add_option("--attempts", attempts, "how many dispatches the approval covers (default 1)")
      ->check(CLI::Range(1u, 1000u));
  approve->add_option("--expires-in", expires_in, "seconds the approval stays good (default 3600, at most 366 days)")
      ->check(CLI::Range(int64_t{1}, broker::kMaxApprovalTtlMs / 1000));
  approve->add_flag("--json", g.json, "print JSON");
  approve->callback(
      [&g, &run] { run = [&g] { return decide_verb(g, approve_id, true, attempts, expires_in); }; });
  auto* deny = app.add_subcommand("deny", "deny one held call: it never runs");
  deny->add_option("id", deny_id, "the approval request's id")->required();
  deny->add_flag("--json", g.json, "print JSON");
  deny->callback([&g, &run] { run = [&g] { return decide_verb(g, deny_id, false, 0, 1); }; });
}

}  // namespace airlock::cli
