// Agent profiles: the built-in set parses, bypass arguments are refused exactly (never by prefix
// or substring), model and resume follow the policy; `confinement` is a closed worker setting;
// the plan hides credential files or refuses the tier that cannot.
#include <gtest/gtest.h>

#include "plan/plan.h"
#include "policy/agent_profile.h"
#include "policy/task_policy.h"

namespace airlock::policy {
namespace {

AgentProfile profile(const std::string& name) {
  auto p = find_agent_profile(name);
  EXPECT_TRUE(p.has_value()) << name;
  return *p;
}

Code refused(const std::string& name, std::vector<std::string> args, AgentPolicy a = {}) {
  auto r = check_agent_args(profile(name), args, a);
  return r ? Code::NotFound : r.error().code;  // NotFound stands for "allowed" here
}

bool allowed(const std::string& name, std::vector<std::string> args, AgentPolicy a = {}) {
  return check_agent_args(profile(name), args, a).has_value();
}

TEST(AgentProfiles, TheBuiltInSetIsClaudeCodeCodexAndGemini) {
  std::vector<std::string> names;
  for (const auto& p : builtin_agent_profiles()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"claude-code", "codex", "gemini"}));
  for (const auto& p : builtin_agent_profiles()) {
    EXPECT_FALSE(p.bypass_tokens.empty()) << p.name;
    EXPECT_FALSE(p.credential_files.empty()) << p.name;
    EXPECT_FALSE(p.credential_variables.empty()) << p.name;
    auto again = parse_agent_profile(to_json(p));
    ASSERT_TRUE(again) << again.error().message;
    EXPECT_EQ(to_json(*again), to_json(p));
  }
  auto unknown = find_agent_profile("cursor");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, Code::OptionInvalid);
}

TEST(AgentProfiles, StrictParseNamesTheOffendingKey) {
  Json doc = to_json(profile("codex"));
  doc["bypass_token"] = Json::array();
  auto r = parse_agent_profile(doc);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().facts["path"], "$.bypass_token");
  doc = to_json(profile("codex"));
  doc["schema_version"] = "airlock.agent_profile.v2";
  EXPECT_FALSE(parse_agent_profile(doc));
}

TEST(AgentBypass, EveryTokenOfEveryProfileIsRefusedExactAndInFlagValueForm) {
  for (const auto& p : builtin_agent_profiles()) {
    for (const auto& t : p.bypass_tokens) {
      EXPECT_EQ(refused(p.name, {"-p", "hello", t}), Code::BypassRefused) << t;
      EXPECT_EQ(refused(p.name, {t + "=true"}), Code::BypassRefused) << t;
    }
    for (const auto& b : p.bypass_values)
      for (const auto& v : b.values) {
        EXPECT_EQ(refused(p.name, {b.flag, v}), Code::BypassRefused) << b.flag << " " << v;
        EXPECT_EQ(refused(p.name, {b.flag + "=" + v}), Code::BypassRefused) << b.flag << "=" << v;
      }
  }
}

// The design's rule: one closed list of known bypass tokens, refused on every final command line
// whichever tool it belongs to, as exact arguments and in --flag=value form only.
TEST(AgentBypass, TheClosedListIsRefusedForEveryAgentWhicheverToolItBelongsTo) {
  EXPECT_EQ(std::size(kSharedBypassTokens), 9u);
  for (const auto& p : builtin_agent_profiles())
    for (std::string_view t : kSharedBypassTokens) {
      auto r = check_agent_args(p, {"-p", "hi", std::string(t)}, {});
      ASSERT_FALSE(r) << p.name << " let " << t << " through";
      EXPECT_EQ(r.error().code, Code::BypassRefused);
      EXPECT_EQ(r.error().facts["list"], "shared") << p.name << " " << t;
      if (t.find('=') == std::string_view::npos) {
        EXPECT_EQ(refused(p.name, {std::string(t) + "=1"}), Code::BypassRefused) << p.name << " " << t;
      }
    }
  // --yolo (Gemini) to Claude Code and --dangerously-skip-permissions (Claude Code) to Codex.
  EXPECT_EQ(refused("claude-code", {"--yolo"}), Code::BypassRefused);
  EXPECT_EQ(refused("codex", {"--dangerously-skip-permissions"}), Code::BypassRefused);
  // Only exact arguments: never a prefix, a substring or a value of another flag.
  EXPECT_TRUE(allowed("codex", {"-p", "--yolo is a flag of another tool"}));
  EXPECT_TRUE(allowed("claude-code", {"--yolo-mode"}));
  EXPECT_TRUE(allowed("claude-code", {"--approval-mode=ask"}));
}

TEST(AgentBypass, EveryProfilesOwnLongTokenIsOnTheClosedList) {
  auto shared = [](const std::string& t) {
    return std::find(std::begin(kSharedBypassTokens), std::end(kSharedBypassTokens), t) != std::end(kSharedBypassTokens);
  };
  for (const auto& p : builtin_agent_profiles())
    for (const auto& t : p.bypass_tokens)
      if (t.starts_with("--")) {
        EXPECT_TRUE(shared(t)) << p.name << " " << t;
      }
}

TEST(AgentBypass, NeverByPrefixOrSubstring) {
  EXPECT_TRUE(allowed("claude-code", {"-p", "explain --dangerously-skip-permissions to me"}));
  EXPECT_TRUE(allowed("claude-code", {"--dangerously-skip-permissionsX"}));
  EXPECT_TRUE(allowed("claude-code", {"--permission-mode", "plan"}));
  EXPECT_TRUE(allowed("claude-code", {"--permission-mode=default"}));
  EXPECT_TRUE(allowed("gemini", {"--yolo-later", "-yes"}));
  EXPECT_TRUE(allowed("codex", {"--sandbox", "workspace-write", "exec", "say hi"}));
  EXPECT_TRUE(allowed("codex", {"-c", "model_reasoning_effort=high"}));
  EXPECT_EQ(refused("codex", {"-c", "sandbox_mode=danger-full-access"}), Code::BypassRefused);
  auto r = check_agent_args(profile("gemini"), {"-y"}, {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().facts["token"], "-y");
  EXPECT_EQ(r.error().facts["profile"], "gemini");
}

TEST(AgentBypass, OnlyThePolicysModel) {
  AgentPolicy a;
  EXPECT_EQ(refused("claude-code", {"--model", "opus"}, a), Code::BypassRefused);
  a.model = "sonnet";
  EXPECT_TRUE(allowed("claude-code", {"--model", "sonnet", "-p", "hi"}, a));
  EXPECT_TRUE(allowed("claude-code", {"--model=sonnet"}, a));
  EXPECT_EQ(refused("claude-code", {"--model", "opus"}, a), Code::BypassRefused);
  EXPECT_EQ(refused("claude-code", {"--model=opus"}, a), Code::BypassRefused);
  EXPECT_EQ(refused("codex", {"-m", "o3"}, a), Code::BypassRefused);
  EXPECT_TRUE(allowed("codex", {"-m", "sonnet"}, a));
}

TEST(AgentBypass, ResumeAndContinueOnlyWhenThePolicyAsks) {
  AgentPolicy a;
  EXPECT_EQ(refused("claude-code", {"--resume", "abc"}, a), Code::BypassRefused);
  EXPECT_EQ(refused("claude-code", {"-c"}, a), Code::BypassRefused);
  EXPECT_EQ(refused("codex", {"resume", "--last"}, a), Code::BypassRefused);
  EXPECT_EQ(refused("codex", {"exec", "resume", "--last"}, a), Code::BypassRefused);
  EXPECT_TRUE(allowed("codex", {"exec", "please resume the work"}, a));
  EXPECT_EQ(refused("codex", {"exec", "resume"}, a), Code::BypassRefused);
  EXPECT_EQ(refused("gemini", {"--resume=latest"}, a), Code::BypassRefused);
  a.resume = true;
  EXPECT_TRUE(allowed("claude-code", {"--resume", "abc"}, a));
  EXPECT_TRUE(allowed("codex", {"resume", "--last"}, a));
  EXPECT_EQ(refused("claude-code", {"--continue"}, a), Code::BypassRefused);
  a.continue_session = true;
  EXPECT_TRUE(allowed("claude-code", {"--continue"}, a));
  // Asking for resume never admits a bypass.
  EXPECT_EQ(refused("claude-code", {"--continue", "--dangerously-skip-permissions"}, a), Code::BypassRefused);
}

TEST(AgentCredentials, EveryProfilesFilesAndVariables) {
  auto paths = credential_paths("/home/op");
  for (const char* want : {"/home/op/.claude/.credentials.json", "/home/op/.claude.json", "/home/op/.codex/auth.json",
                           "/home/op/.codex/config.toml", "/home/op/.gemini/oauth_creds.json"})
    EXPECT_NE(std::find(paths.begin(), paths.end(), want), paths.end()) << want;
  auto vars = credential_variables();
  for (const char* want : {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "CODEX_API_KEY"})
    EXPECT_NE(std::find(vars.begin(), vars.end(), want), vars.end()) << want;
}

constexpr const char* kHeader = R"({"schema_version": "airlock.task_policy.v1")";

TEST(AgentPolicyParse, ConfinementIsAClosedWorkerSetting) {
  auto worker = parse_layer_text(std::string(kHeader) + R"(, "confinement": "vendor"})", builtin_default(), "w", true);
  ASSERT_TRUE(worker) << worker.error().message;
  EXPECT_EQ(worker->confinement, Confinement::Vendor);
  EXPECT_EQ(to_json(*worker)["confinement"], "vendor");
  auto other = parse_layer_text(std::string(kHeader) + R"(, "confinement": "none"})", builtin_default(), "w", true);
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().code, Code::PolicyInvalid);
  EXPECT_EQ(other.error().facts["path"], "$.confinement");
  auto task = parse_layer_text(std::string(kHeader) + R"(, "confinement": "engine"})", builtin_default(), "t");
  ASSERT_FALSE(task);
  EXPECT_EQ(task.error().facts["path"], "$.confinement");
  // A policy without the new keys keeps the digest it had before they existed.
  EXPECT_FALSE(to_json(builtin_default()).contains("confinement"));
  EXPECT_FALSE(to_json(builtin_default()).contains("agent"));
}

TEST(AgentPolicyParse, AgentSection) {
  auto p = parse_layer_text(std::string(kHeader) + R"(, "agent": {"model": "sonnet", "resume": true}})",
                            builtin_default(), "t");
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->agent.model, "sonnet");
  EXPECT_TRUE(p->agent.resume);
  EXPECT_FALSE(p->agent.continue_session);
  auto bad = parse_layer_text(std::string(kHeader) + R"(, "agent": {"bypass": true}})", builtin_default(), "t");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().facts["path"], "$.agent.bypass");
}

TEST(AgentPlan, VendorConfinementRunsSupervisedAndSaysSo) {
  TaskPolicy p = builtin_default();
  p.confinement = Confinement::Vendor;
  auto plan = plan::plan_execution(p, plan::facts_everything(), plan::Profile::Production);
  ASSERT_TRUE(plan) << plan.error().message;
  EXPECT_EQ(plan->executor, ExecutorKind::Host);
  EXPECT_NE(std::find(plan->relaxations.begin(), plan->relaxations.end(), "confinement: vendor"),
            plan->relaxations.end());
  EXPECT_NE(plan->why.find("airlock makes no claim the agent is confined"), std::string::npos);
}

TEST(AgentPlan, CredentialFilesBeneathAReadablePathAreMaskedOrTheTierRefused) {
  TaskPolicy p = builtin_default();
  p.read_only_paths = {"/home/op"};
  plan::HostFacts f = plan::facts_everything();
  f.credential_files = {"/home/op/.claude/.credentials.json", "/srv/elsewhere/.codex/auth.json"};
  auto ns = plan::plan_execution(p, f, plan::Profile::Production);
  ASSERT_TRUE(ns) << ns.error().message;
  ASSERT_EQ(ns->executor, ExecutorKind::Namespaces);
  EXPECT_EQ(ns->namespaces->masked, (std::vector<std::string>{"/home/op/.claude/.credentials.json"}));
  EXPECT_NE(std::find(ns->namespaces->ro_binds.begin(), ns->namespaces->ro_binds.end(), "/home/op"),
            ns->namespaces->ro_binds.end());
  p.executor = ExecutorKind::Landlock;
  auto ll = plan::plan_execution(p, f, plan::Profile::Production);
  ASSERT_FALSE(ll);
  EXPECT_EQ(ll.error().code, Code::ExecutorUnavailable);
  EXPECT_NE(ll.error().message.find("/home/op/.claude/.credentials.json"), std::string::npos);
  p.read_only_paths = {"/opt/tool"};
  EXPECT_TRUE(plan::plan_execution(p, f, plan::Profile::Production));
}

}  // namespace
}  // namespace airlock::policy
