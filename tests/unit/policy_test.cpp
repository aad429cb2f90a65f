// Unit tests for the task policy: strict parse with JSON paths, layering, tool resolution, digest.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "base/fs.h"
#include "base/hash.h"
#include "policy/task_policy.h"

namespace airlock::policy {
namespace {

namespace fs = std::filesystem;

const std::string kFixtures = AIRLOCK_SOURCE_DIR "/tests/unit/fixtures/policies";

Result<TaskPolicy> parse(std::string_view text) {
  return parse_layer_text(text, builtin_default(), "inline");
}

Result<TaskPolicy> parse_fixture(const std::string& rel) {
  return load_effective(std::nullopt, kFixtures + "/" + rel);
}

// The facts.path of a refusal, or a note that there was none.
std::string refusal_path(const Result<TaskPolicy>& r) {
  if (r) return "<parsed>";
  return r.error().facts.value("path", "<no path>");
}

// Where the trusted PATH would find `name`, computed independently of resolve_trusted.
std::optional<std::string> first_on_trusted_path(const std::string& name) {
  std::string_view dirs = kTrustedPath;
  while (!dirs.empty()) {
    size_t colon = dirs.find(':');
    std::string candidate = fmt::format("{}/{}", dirs.substr(0, colon), name);
    dirs = colon == std::string_view::npos ? std::string_view{} : dirs.substr(colon + 1);
    if (::access(candidate.c_str(), X_OK) == 0 && fs::is_regular_file(candidate)) return candidate;
  }
  return std::nullopt;
}

// A scratch directory removed when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "airlock-policy-test-XXXXXX").string();
    path_ = ::mkdtemp(templ.data());
  }
  ~TempDir() { (void)remove_tree(path_); }
  const std::string& path() const { return path_; }
  std::string write(const std::string& name, std::string_view text, unsigned mode = 0644) {
    std::string p = path_ + "/" + name;
    EXPECT_TRUE(write_file_atomic(p, text, mode).has_value());
    ::chmod(p.c_str(), mode);
    return p;
  }

 private:
  std::string path_;
};

// ---------------------------------------------------------------- built-in default

TEST(BuiltinDefault, IsTheSafeSingleTenantTrustedToolchainPolicy) {
  TaskPolicy p = builtin_default();
  EXPECT_EQ(p.task_id, "default");
  EXPECT_FALSE(p.workspace.has_value());
  EXPECT_EQ(p.workload, Workload::TrustedToolchain);
  EXPECT_EQ(p.tenancy, Tenancy::SingleTenant);
  EXPECT_EQ(p.executor, ExecutorKind::Auto);
  EXPECT_EQ(p.code_network.mode, NetworkMode::Off);
  EXPECT_TRUE(p.code_network.rules.empty());
  EXPECT_TRUE(p.egress.empty());
  EXPECT_EQ(p.readable, std::vector<std::string>{"."});
  EXPECT_EQ(p.write_back_paths, std::vector<std::string>{"."});
  EXPECT_TRUE(p.read_only_paths.empty());
  ASSERT_EQ(p.tools.size(), 1u);
  EXPECT_EQ(p.tools[0].name, "shell");
  EXPECT_EQ(p.tools[0].argv, (std::vector<std::string>{"/bin/sh", "-c"}));
  EXPECT_TRUE(p.tools[0].allow_args);
  EXPECT_EQ(p.tools[0].timeout_seconds, 300);
  EXPECT_EQ(to_json(p)["limits"], to_json(TaskPolicy{})["limits"]);  // default Limits
}

TEST(BuiltinDefault, IsWhatLoadingNoFilesGives) {
  auto p = load_effective(std::nullopt, std::nullopt);
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(digest(*p), digest(builtin_default()));
}

// ---------------------------------------------------------------- enums

TEST(Enums, RenderAsTheirPolicySpelling) {
  EXPECT_EQ(to_string(Workload::TrustedToolchain), "trusted_toolchain");
  EXPECT_EQ(to_string(Workload::UntrustedCode), "untrusted_code");
  EXPECT_EQ(to_string(Tenancy::SingleTenant), "single_tenant");
  EXPECT_EQ(to_string(Tenancy::MultiTenant), "multi_tenant");
  EXPECT_EQ(to_string(NetworkMode::Off), "off");
  EXPECT_EQ(to_string(NetworkMode::Allowlist), "allowlist");
}

TEST(Enums, ExecutorNamesRoundTrip) {
  for (auto e : {ExecutorKind::Auto, ExecutorKind::Host, ExecutorKind::Landlock, ExecutorKind::Namespaces,
                 ExecutorKind::Microvm, ExecutorKind::Container}) {
    auto back = enum_from_string<ExecutorKind>(to_string(e));
    ASSERT_TRUE(back.has_value()) << to_string(e);
    EXPECT_EQ(*back, e);
  }
  EXPECT_FALSE(enum_from_string<ExecutorKind>("docker").has_value());
  EXPECT_FALSE(enum_from_string<ExecutorKind>("").has_value());
  EXPECT_FALSE(enum_from_string<ExecutorKind>("Landlock").has_value());
}

// ---------------------------------------------------------------- valid fixtures

class ValidFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(ValidFixture, Parses) {
  auto p = parse_fixture("valid/" + GetParam());
  ASSERT_TRUE(p.has_value()) << p.error().to_json().dump();
}

std::vector<std::string> fixture_names(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(kFixtures + "/" + dir))
    if (e.path().extension() == ".json") out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string test_name_of(const std::string& file) {
  std::string s = fs::path(file).stem().string();
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Policies, ValidFixture, ::testing::ValuesIn(fixture_names("valid")),
                         [](const auto& info) { return test_name_of(info.param); });

TEST(ValidFixture, DesignExampleReadsAsWritten) {
  auto p = parse_fixture("valid/design_example.json");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->task_id, "t-1042");
  EXPECT_EQ(p->workspace, "/srv/agent/tasks/t-1042");
  ASSERT_EQ(p->egress.size(), 1u);
  EXPECT_EQ(p->egress[0].host, "api.example.com");
  EXPECT_FALSE(p->egress[0].cidr.has_value());
  EXPECT_EQ(p->egress[0].ports, std::vector<int>{443});
  EXPECT_EQ(p->egress[0].schemes, std::vector<std::string>{"https"});
  EXPECT_FALSE(p->egress[0].allow_private);
  EXPECT_EQ(p->readable, (std::vector<std::string>{"src", "tests", "docs"}));
  EXPECT_EQ(p->write_back_paths, (std::vector<std::string>{"src", "reports"}));
  ASSERT_EQ(p->tools.size(), 1u);
  EXPECT_EQ(p->tools[0].name, "tests");
  EXPECT_TRUE(p->tools[0].argv[0].starts_with("/"));
  EXPECT_EQ(p->tools[0].argv[1], "-m");
  EXPECT_EQ(p->limits.memory_mb, 1024);
  // Limits it does not name keep the built-in values.
  EXPECT_EQ(p->limits.cpu_seconds, Limits{}.cpu_seconds);
  EXPECT_EQ(p->limits.max_processes, Limits{}.max_processes);
}

TEST(ValidFixture, CodeNetworkAllowlistKeepsHostAndCidrRules) {
  auto p = parse_fixture("valid/code_network_allowlist.json");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->workload, Workload::UntrustedCode);
  EXPECT_EQ(p->tenancy, Tenancy::MultiTenant);
  EXPECT_EQ(p->executor, ExecutorKind::Microvm);
  EXPECT_EQ(p->code_network.mode, NetworkMode::Allowlist);
  ASSERT_EQ(p->code_network.rules.size(), 2u);
  EXPECT_EQ(p->code_network.rules[0].host, "pypi.org");
  EXPECT_EQ(p->code_network.rules[0].schemes, std::vector<std::string>{"https"});  // the default
  EXPECT_EQ(p->code_network.rules[1].cidr, "10.20.0.0/16");
  EXPECT_EQ(p->code_network.rules[1].ports, (std::vector<int>{80, 8080}));
  EXPECT_TRUE(p->code_network.rules[1].allow_private);
  EXPECT_EQ(p->read_only_paths, (std::vector<std::string>{"/opt/toolchains", "/usr/share/zoneinfo"}));
  EXPECT_EQ(p->limits.memory_mb, 4096);
  EXPECT_EQ(p->limits.cpu_seconds, 600);
  EXPECT_EQ(p->limits.max_processes, 64);
  EXPECT_EQ(p->limits.command_timeout_seconds, 120);
  EXPECT_EQ(p->limits.session_budget_seconds, 3600);
  EXPECT_EQ(p->limits.max_actions_per_minute, 30);
}

TEST(ValidFixture, MinimalLayerChangesNothing) {
  auto p = parse_fixture("valid/minimal.json");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(digest(*p), digest(builtin_default()));
}

// ---------------------------------------------------------------- invalid fixtures

// Every file in fixtures/policies/invalid and the exact facts.path its refusal names.
const std::map<std::string, std::string>& invalid_expectations() {
  static const std::map<std::string, std::string> kExpected = {
      {"not_an_object.json", "$"},
      {"missing_schema_version.json", "$.schema_version"},
      {"unknown_schema_version.json", "$.schema_version"},
      {"schema_version_not_string.json", "$.schema_version"},
      {"syntax_error.json", "$"},
      {"duplicate_key.json", "$.limits.memory_mb"},
      {"unknown_top_level_key.json", "$.exectuor"},
      {"unknown_limits_key.json", "$.limits.memroy_mb"},
      {"unknown_tool_key.json", "$.tools[0].argz"},
      {"unknown_egress_key.json", "$.egress[0].port"},
      {"unknown_code_network_key.json", "$.code_network.rule"},
      {"unknown_code_network_rule_key.json", "$.code_network.rules[0].hosts"},
      {"limits_not_object.json", "$.limits"},
      {"limits_zero.json", "$.limits.memory_mb"},
      {"limits_negative.json", "$.limits.cpu_seconds"},
      {"limits_float.json", "$.limits.max_processes"},
      {"limits_bool.json", "$.limits.command_timeout_seconds"},
      {"limits_string.json", "$.limits.session_budget_seconds"},
      {"limits_too_large.json", "$.limits.max_actions_per_minute"},
      {"workload_unknown.json", "$.workload"},
      {"tenancy_unknown.json", "$.tenancy"},
      {"executor_unknown.json", "$.executor"},
      {"task_id_empty.json", "$.task_id"},
      {"task_id_with_slash.json", "$.task_id"},
      {"workspace_relative.json", "$.workspace"},
      {"workspace_not_string.json", "$.workspace"},
      {"workspace_root.json", "$.workspace"},
      {"readable_parent_component.json", "$.readable[1]"},
      {"readable_absolute.json", "$.readable[0]"},
      {"readable_empty_string.json", "$.readable[0]"},
      {"readable_not_array.json", "$.readable"},
      {"write_back_hidden_parent.json", "$.write_back_paths[1]"},
      {"read_only_relative.json", "$.read_only_paths[0]"},
      {"code_network_allowlist_without_rules.json", "$.code_network.rules"},
      {"code_network_allowlist_empty_rules.json", "$.code_network.rules"},
      {"code_network_off_with_rules.json", "$.code_network.rules"},
      {"code_network_mode_unknown.json", "$.code_network.mode"},
      {"egress_host_and_cidr.json", "$.egress[0]"},
      {"egress_neither_host_nor_cidr.json", "$.egress[0]"},
      {"egress_ports_missing.json", "$.egress[0].ports"},
      {"egress_ports_empty.json", "$.egress[0].ports"},
      {"egress_port_out_of_range.json", "$.egress[0].ports[1]"},
      {"egress_port_zero.json", "$.egress[0].ports[0]"},
      {"egress_scheme_unknown.json", "$.egress[0].schemes[0]"},
      {"egress_cidr_malformed.json", "$.egress[0].cidr"},
      {"egress_cidr_host_bits.json", "$.egress[0].cidr"},
      {"egress_host_with_scheme.json", "$.egress[0].host"},
      {"egress_allow_private_string.json", "$.egress[0].allow_private"},
      {"egress_not_array.json", "$.egress"},
      {"tools_not_array.json", "$.tools"},
      {"tool_argv_not_array.json", "$.tools[1].argv"},
      {"tool_argv_empty.json", "$.tools[0].argv"},
      {"tool_argv_element_not_string.json", "$.tools[0].argv[2]"},
      {"tool_argv_missing.json", "$.tools[0].argv"},
      {"tool_name_missing.json", "$.tools[0].name"},
      {"tool_name_invalid.json", "$.tools[0].name"},
      {"tool_name_duplicate.json", "$.tools[1].name"},
      {"tool_not_found.json", "$.tools[0].argv[0]"},
      {"tool_relative_path.json", "$.tools[0].argv[0]"},
      {"tool_absolute_missing.json", "$.tools[0].argv[0]"},
      {"tool_absolute_directory.json", "$.tools[0].argv[0]"},
      {"tool_timeout_zero.json", "$.tools[0].timeout_seconds"},
      {"tool_allow_args_not_bool.json", "$.tools[0].allow_args"},
      {"tool_protocol_unknown.json", "$.tools[0].protocol"},
      {"tool_json_protocol_allow_args.json", "$.tools[0].allow_args"},
      {"tool_env_not_array.json", "$.tools[0].env"},
      {"tool_env_bad_name.json", "$.tools[0].env[1]"},
      {"tool_env_airlock_own.json", "$.tools[0].env[0]"},
      {"tool_env_path.json", "$.tools[0].env[0]"},
      {"tool_max_output_zero.json", "$.tools[0].max_output_bytes"},
  };
  return kExpected;
}

class InvalidFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(InvalidFixture, IsRefusedWithTheOffendingPath) {
  auto it = invalid_expectations().find(GetParam());
  ASSERT_NE(it, invalid_expectations().end()) << GetParam() << " has no expected path in the table";
  auto p = parse_fixture("invalid/" + GetParam());
  ASSERT_FALSE(p.has_value()) << GetParam() << " parsed";
  EXPECT_EQ(p.error().code, Code::PolicyInvalid) << to_name(p.error().code);
  EXPECT_EQ(refusal_path(p), it->second) << p.error().message;
  // The refusal names the file it came from.
  EXPECT_NE(p.error().message.find(GetParam()), std::string::npos) << p.error().message;
}

INSTANTIATE_TEST_SUITE_P(Policies, InvalidFixture, ::testing::ValuesIn(fixture_names("invalid")),
                         [](const auto& info) { return test_name_of(info.param); });

TEST(InvalidFixture, EveryTableEntryHasAFile) {
  auto names = fixture_names("invalid");
  std::set<std::string> files(names.begin(), names.end());
  for (const auto& [name, path] : invalid_expectations())
    EXPECT_TRUE(files.contains(name)) << name << " (expected " << path << ") is missing";
}

// ---------------------------------------------------------------- refusal messages

TEST(Refusal, UnknownKeyNamesTheKeyWhereItIsAndWhatIsAllowed) {
  auto p = parse(R"({"schema_version":"airlock.task_policy.v1","limits":{"memroy_mb":512}})");
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().facts["path"], "$.limits.memroy_mb");
  EXPECT_NE(p.error().message.find(
                R"(unknown key "memroy_mb" at $.limits (allowed: memory_mb, cpu_seconds, max_processes, )"),
            std::string::npos)
      << p.error().message;
}

TEST(Refusal, SyntaxErrorGivesTheByteOffsetAndSource) {
  auto p = parse_layer_text("{\"schema_version\": ", builtin_default(), "task.json");
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().code, Code::PolicyInvalid);
  EXPECT_TRUE(p.error().facts.contains("byte"));
  EXPECT_TRUE(p.error().facts["byte"].is_number_integer());
  EXPECT_NE(p.error().message.find("task.json"), std::string::npos) << p.error().message;
}

TEST(Refusal, UnknownSchemaVersionSaysWhichVersionIsRead) {
  auto p = parse(R"({"schema_version":"airlock.task_policy.v9"})");
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().facts["path"], "$.schema_version");
  EXPECT_NE(p.error().message.find("airlock.task_policy.v1"), std::string::npos) << p.error().message;
}

TEST(Refusal, SchemaVersionIsCheckedBeforeOtherKeys) {
  // An unknown version may well have keys this build does not know: the version is the real fault.
  auto p = parse(R"({"schema_version":"airlock.task_policy.v2","new_feature":true})");
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().facts["path"], "$.schema_version");
}

TEST(Refusal, NonObjectDocumentIsRefusedAtTheRoot) {
  auto p = parse_layer(Json::array(), builtin_default());
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().code, Code::PolicyInvalid);
  EXPECT_EQ(p.error().facts["path"], "$");
}

TEST(Refusal, DuplicateKeysInNestedArraysNameTheirPath) {
  auto p = parse(R"({"schema_version":"airlock.task_policy.v1",
    "tools":[{"name":"a","argv":["/bin/sh"]},{"name":"b","argv":["/bin/sh"],"name":"c"}]})");
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().facts["path"], "$.tools[1].name");
}

// ---------------------------------------------------------------- limits

TEST(Limits, AcceptOnlyPositiveIntegers) {
  const char* keys[] = {"memory_mb",
                        "cpu_seconds",
                        "max_processes",
                        "command_timeout_seconds",
                        "session_budget_seconds",
                        "max_actions_per_minute"};
  const char* bad_values[] = {"0",     "-1",     "1.5",  "10.0", "1e3", "true",
                              "false", "\"10\"", "null", "[10]", "{}"};
  for (const char* key : keys) {
    for (const char* value : bad_values) {
      auto p = parse(
          fmt::format(R"({{"schema_version":"airlock.task_policy.v1","limits":{{"{}":{}}}}})", key, value));
      ASSERT_FALSE(p.has_value()) << key << "=" << value;
      EXPECT_EQ(p.error().code, Code::PolicyInvalid);
      EXPECT_EQ(p.error().facts["path"], fmt::format("$.limits.{}", key)) << value;
    }
    auto ok = parse(fmt::format(R"({{"schema_version":"airlock.task_policy.v1","limits":{{"{}":7}}}})", key));
    ASSERT_TRUE(ok.has_value()) << key << ": " << ok.error().message;
    EXPECT_EQ(to_json(*ok)["limits"][key], 7);
  }
}

TEST(Limits, MemoryMayExceedThirtyTwoBitsButOthersMayNot) {
  auto big_memory = parse(R"({"schema_version":"airlock.task_policy.v1","limits":{"memory_mb":4294967296}})");
  ASSERT_TRUE(big_memory.has_value()) << big_memory.error().message;
  EXPECT_EQ(big_memory->limits.memory_mb, 4294967296LL);

  auto big_cpu = parse(R"({"schema_version":"airlock.task_policy.v1","limits":{"cpu_seconds":4294967296}})");
  ASSERT_FALSE(big_cpu.has_value());
  EXPECT_EQ(big_cpu.error().facts["path"], "$.limits.cpu_seconds");

  auto huge_memory =
      parse(R"({"schema_version":"airlock.task_policy.v1","limits":{"memory_mb":18446744073709551615}})");
  ASSERT_FALSE(huge_memory.has_value());
  EXPECT_EQ(huge_memory.error().facts["path"], "$.limits.memory_mb");
}

// ---------------------------------------------------------------- paths

TEST(Paths, WorkspaceRelativePrefixesAreNormalised) {
  auto p = parse(R"({"schema_version":"airlock.task_policy.v1",
    "readable":["src/", "./src", "./", ".", "a//b/./c/", "./docs/api"],
    "write_back_paths":["reports/", "././out"]})");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->readable, (std::vector<std::string>{"src", "src", ".", ".", "a/b/c", "docs/api"}));
  EXPECT_EQ(p->write_back_paths, (std::vector<std::string>{"reports", "out"}));
}

TEST(Paths, ParentComponentsAreRefusedWhereverTheyAppear) {
  for (const char* bad : {"..", "../x", "src/..", "src/../docs", "a/b/../../..", "./..", "src/../../etc"}) {
    for (const char* key : {"readable", "write_back_paths"}) {
      auto p =
          parse(fmt::format(R"({{"schema_version":"airlock.task_policy.v1","{}":["ok","{}"]}})", key, bad));
      ASSERT_FALSE(p.has_value()) << key << ": " << bad;
      EXPECT_EQ(p.error().code, Code::PolicyInvalid);
      EXPECT_EQ(p.error().facts["path"], fmt::format("$.{}[1]", key)) << bad;
    }
  }
}

TEST(Paths, NamesThatMerelyContainDotsAreAllowed) {
  auto p = parse(R"({"schema_version":"airlock.task_policy.v1","readable":["..hidden", "a..b", ".config"]})");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->readable, (std::vector<std::string>{"..hidden", "a..b", ".config"}));
}

TEST(Paths, AbsoluteEmptyAndNulEntriesAreRefused) {
  for (const char* bad : {R"("/etc")", R"("")", R"("src\u0000x")", "7", "null"}) {
    auto p =
        parse(fmt::format(R"({{"schema_version":"airlock.task_policy.v1","write_back_paths":[{}]}})", bad));
    ASSERT_FALSE(p.has_value()) << bad;
    EXPECT_EQ(p.error().facts["path"], "$.write_back_paths[0]") << bad;
  }
}

TEST(Paths, WorkspaceIsNormalisedLexically) {
  auto p = parse(R"({"schema_version":"airlock.task_policy.v1","workspace":"/srv//agent/./x/../t-1/"})");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->workspace, "/srv/agent/t-1");
}

TEST(Paths, NullWorkspaceClearsTheLowerLayersWorkspace) {
  TaskPolicy base = builtin_default();
  base.workspace = "/srv/agent/default";
  auto p = parse_layer_text(R"({"schema_version":"airlock.task_policy.v1","workspace":null})", base, "t");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_FALSE(p->workspace.has_value());
}

TEST(Paths, ReadOnlyHostPathsMustBeAbsoluteAndAreNormalised) {
  auto p = parse(
      R"({"schema_version":"airlock.task_policy.v1","read_only_paths":["/opt/tools/", "/usr//share"]})");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->read_only_paths, (std::vector<std::string>{"/opt/tools", "/usr/share"}));
  auto bad = parse(R"({"schema_version":"airlock.task_policy.v1","read_only_paths":["/opt", "opt"]})");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().facts["path"], "$.read_only_paths[1]");
}

// ---------------------------------------------------------------- egress

TEST(Egress, HostsAreLowerCasedAndCidrsCanonical) {
  auto p = parse(R"({"schema_version":"airlock.task_policy.v1","egress":[
    {"host":"API.Example.COM.","ports":[443]},
    {"cidr":"fd00:0::/8","ports":[8443],"schemes":["http","https"]}]})");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->egress[0].host, "api.example.com");
  EXPECT_EQ(p->egress[1].cidr, "fd00::/8");
  EXPECT_EQ(p->egress[1].schemes, (std::vector<std::string>{"http", "https"}));
}

// ---------------------------------------------------------------- code network

TEST(CodeNetwork, RulesWithoutAllowlistModeAreRefused) {
  auto p = parse(R"({"schema_version":"airlock.task_policy.v1",
    "code_network":{"rules":[{"host":"a.example","ports":[443]}]}})");
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().facts["path"], "$.code_network.rules");
}

// ---------------------------------------------------------------- tools

// The design's rule: a declared tool's program is an absolute path, never a PATH lookup. A bare
// name is refused when the policy loads, with where the trusted PATH (never the caller's) has it.
TEST(Tools, ABareProgramNameIsRefusedWhenThePolicyLoads) {
  auto expected = first_on_trusted_path("python3");
  if (!expected) GTEST_SKIP() << "python3 is not installed on the trusted PATH " << kTrustedPath;
  const char* old = std::getenv("PATH");
  std::string saved = old ? old : "";
  ::setenv("PATH", "/nonexistent-airlock-path", 1);
  auto p = parse(R"({"schema_version":"airlock.task_policy.v1",
    "tools":[{"name":"py","argv":["python3","-c","pass"]}]})");
  if (old)
    ::setenv("PATH", saved.c_str(), 1);
  else
    ::unsetenv("PATH");
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().code, Code::PolicyInvalid);
  EXPECT_EQ(p.error().facts["path"], "$.tools[0].argv[0]");
  EXPECT_NE(p.error().message.find("must be an absolute path"), std::string::npos) << p.error().message;
  EXPECT_NE(p.error().message.find(*expected), std::string::npos) << p.error().message;
  auto abs = parse(R"({"schema_version":"airlock.task_policy.v1",
    "tools":[{"name":"py","argv":[")" + *expected + R"(","-c","pass"]}]})");
  ASSERT_TRUE(abs.has_value()) << abs.error().message;
  EXPECT_EQ(abs->tools[0].argv, (std::vector<std::string>{*expected, "-c", "pass"}));
}

TEST(Tools, ResolutionKeepsSymlinksAsFound) {
  auto expected = first_on_trusted_path("python3");
  if (!expected) GTEST_SKIP() << "python3 is not installed on the trusted PATH " << kTrustedPath;
  auto resolved = resolve_trusted("python3");
  ASSERT_TRUE(resolved.has_value()) << resolved.error().message;
  // /usr/bin/python3 is usually a link to python3.N: the name found is what is recorded.
  EXPECT_EQ(*resolved, *expected);

  TempDir dir;
  std::string link = dir.path() + "/sh-link";
  ASSERT_EQ(::symlink("/bin/sh", link.c_str()), 0);
  auto abs = resolve_trusted(link);
  ASSERT_TRUE(abs.has_value()) << abs.error().message;
  EXPECT_EQ(*abs, link);
}

TEST(Tools, UnknownProgramIsRefusedWithTheTrustedPath) {
  auto r = resolve_trusted("no-such-tool-xyz");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::PolicyInvalid);
  EXPECT_EQ(r.error().facts["trusted_path"], kTrustedPath);

  auto p = parse(R"({"schema_version":"airlock.task_policy.v1",
    "tools":[{"name":"ok","argv":["/bin/sh"]},{"name":"x","argv":["no-such-tool-xyz","--help"]}]})");
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().code, Code::PolicyInvalid);
  EXPECT_EQ(p.error().facts["path"], "$.tools[1].argv[0]");
  EXPECT_NE(p.error().message.find("no-such-tool-xyz"), std::string::npos) << p.error().message;
  EXPECT_NE(p.error().message.find("must be an absolute path"), std::string::npos) << p.error().message;
}

TEST(Tools, AbsoluteProgramMustBeAnExecutableRegularFile) {
  TempDir dir;
  std::string plain = dir.write("not-executable", "#!/bin/sh\n", 0644);
  std::string runnable = dir.write("runnable", "#!/bin/sh\n", 0755);

  EXPECT_FALSE(resolve_trusted(plain).has_value());
  EXPECT_FALSE(resolve_trusted(dir.path()).has_value());
  EXPECT_FALSE(resolve_trusted(dir.path() + "/missing").has_value());
  auto ok = resolve_trusted(runnable);
  ASSERT_TRUE(ok.has_value()) << ok.error().message;
  EXPECT_EQ(*ok, runnable);
}

TEST(Tools, RelativePathsAndEmptyNamesAreRefused) {
  for (const char* bad : {"./run.sh", "bin/run", "", "../sh"}) {
    auto r = resolve_trusted(bad);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().code, Code::PolicyInvalid);
  }
}

TEST(Tools, DefaultsApplyToOmittedFields) {
  auto p = parse(R"({"schema_version":"airlock.task_policy.v1","tools":[{"name":"sh","argv":["/bin/sh"]}]})");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  ASSERT_EQ(p->tools.size(), 1u);
  EXPECT_FALSE(p->tools[0].allow_args);
  EXPECT_EQ(p->tools[0].timeout_seconds, 300);
  EXPECT_EQ(p->tools[0].argv[0], "/bin/sh");
}

TEST(Tools, EmptyListDeclaresNoTools) {
  auto p = parse(R"({"schema_version":"airlock.task_policy.v1","tools":[]})");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_TRUE(p->tools.empty());
}

// ---------------------------------------------------------------- layering

TEST(Layering, TaskOverridesDefaultsWhichOverrideBuiltin) {
  auto p =
      load_effective(kFixtures + "/valid/worker_defaults.json", kFixtures + "/valid/task_over_defaults.json");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->task_id, "t-7");                                   // task
  EXPECT_EQ(p->workspace, "/srv/agent/default");                  // worker defaults
  EXPECT_EQ(p->executor, ExecutorKind::Landlock);                 // worker defaults
  EXPECT_EQ(p->workload, Workload::TrustedToolchain);             // built-in
  EXPECT_EQ(p->write_back_paths, std::vector<std::string>{"."});  // built-in
  ASSERT_EQ(p->tools.size(), 1u);                                 // built-in shell tool
  EXPECT_EQ(p->tools[0].name, "shell");
  ASSERT_EQ(p->egress.size(), 1u);  // worker defaults
  EXPECT_EQ(p->egress[0].host, "mirror.internal.example");
}

TEST(Layering, ArraysAreReplacedNotMerged) {
  auto p =
      load_effective(kFixtures + "/valid/worker_defaults.json", kFixtures + "/valid/task_over_defaults.json");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  // defaults say ["src","docs"], the task says ["tests"]: the task's list wins whole.
  EXPECT_EQ(p->readable, std::vector<std::string>{"tests"});
}

TEST(Layering, LimitsAreMergedPerKey) {
  auto p =
      load_effective(kFixtures + "/valid/worker_defaults.json", kFixtures + "/valid/task_over_defaults.json");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->limits.memory_mb, 2048);                        // worker defaults
  EXPECT_EQ(p->limits.cpu_seconds, 60);                        // task over defaults' 120
  EXPECT_EQ(p->limits.max_actions_per_minute, 10);             // task
  EXPECT_EQ(p->limits.max_processes, Limits{}.max_processes);  // built-in
}

TEST(Layering, CodeNetworkIsMergedPerKeyAndOffDropsLowerRules) {
  auto defaults_only = load_effective(kFixtures + "/valid/worker_defaults.json", std::nullopt);
  ASSERT_TRUE(defaults_only.has_value()) << defaults_only.error().message;
  EXPECT_EQ(defaults_only->code_network.mode, NetworkMode::Allowlist);
  ASSERT_EQ(defaults_only->code_network.rules.size(), 1u);

  // The task turns code network off: the defaults' rules do not linger behind "off".
  auto p =
      load_effective(kFixtures + "/valid/worker_defaults.json", kFixtures + "/valid/task_over_defaults.json");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->code_network.mode, NetworkMode::Off);
  EXPECT_TRUE(p->code_network.rules.empty());

  // Replacing only the rules keeps the lower layer's allowlist mode.
  auto rules_only = parse_layer_text(R"({"schema_version":"airlock.task_policy.v1",
      "code_network":{"rules":[{"host":"b.example","ports":[443]}]}})",
                                     *defaults_only, "task");
  ASSERT_TRUE(rules_only.has_value()) << rules_only.error().message;
  EXPECT_EQ(rules_only->code_network.mode, NetworkMode::Allowlist);
  ASSERT_EQ(rules_only->code_network.rules.size(), 1u);
  EXPECT_EQ(rules_only->code_network.rules[0].host, "b.example");

  // Naming the mode alone keeps the lower layer's rules.
  auto mode_only = parse_layer_text(R"({"schema_version":"airlock.task_policy.v1",
      "code_network":{"mode":"allowlist"}})",
                                    *defaults_only, "task");
  ASSERT_TRUE(mode_only.has_value()) << mode_only.error().message;
  EXPECT_EQ(mode_only->code_network.rules.size(), 1u);
}

TEST(Layering, MissingFileIsRefusedNamingTheFile) {
  const std::string missing = kFixtures + "/valid/does-not-exist.json";
  for (auto p : {load_effective(missing, std::nullopt), load_effective(std::nullopt, missing)}) {
    ASSERT_FALSE(p.has_value());
    EXPECT_EQ(p.error().code, Code::PolicyInvalid);
    EXPECT_NE(p.error().message.find(missing), std::string::npos) << p.error().message;
  }
}

TEST(Layering, AnInvalidDefaultsFileStopsLoading) {
  auto p = load_effective(kFixtures + "/invalid/unknown_limits_key.json", kFixtures + "/valid/minimal.json");
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().facts["path"], "$.limits.memroy_mb");
  EXPECT_NE(p.error().message.find("unknown_limits_key.json"), std::string::npos) << p.error().message;
}

// ---------------------------------------------------------------- canonical form and digest

TEST(Digest, IsSha256OfTheCanonicalJson) {
  TaskPolicy p = builtin_default();
  EXPECT_EQ(digest(p), sha256_hex(canonical_json(to_json(p))));
  EXPECT_EQ(digest(p).size(), 64u);
}

TEST(Digest, CanonicalJsonHasEveryField) {
  Json j = to_json(builtin_default());
  for (const char* key :
       {"schema_version", "task_id", "workspace", "workload", "tenancy", "executor", "code_network", "egress",
        "readable", "write_back_paths", "read_only_paths", "tools", "limits"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["schema_version"], kSchemaVersion);
  EXPECT_TRUE(j["workspace"].is_null());
  EXPECT_TRUE(j["code_network"].contains("mode"));
  EXPECT_TRUE(j["code_network"].contains("rules"));
  for (const char* key : {"memory_mb", "cpu_seconds", "max_processes", "command_timeout_seconds",
                          "session_budget_seconds", "max_actions_per_minute"})
    EXPECT_TRUE(j["limits"].contains(key)) << key;
  for (const char* key : {"name", "argv", "allow_args", "timeout_seconds"})
    EXPECT_TRUE(j["tools"][0].contains(key)) << key;
}

TEST(Digest, IsStableAcrossKeyOrderSpacingAndPathSpelling) {
  auto a = parse_fixture("valid/key_order_a.json");
  auto b = parse_fixture("valid/key_order_b.json");
  ASSERT_TRUE(a.has_value()) << a.error().message;
  ASSERT_TRUE(b.has_value()) << b.error().message;
  EXPECT_EQ(canonical_json(to_json(*a)), canonical_json(to_json(*b)));
  EXPECT_EQ(digest(*a), digest(*b));
}

TEST(Digest, IsStableAcrossLayering) {
  // The same effective policy reached in one layer or in two gives one digest.
  auto one = parse(R"({"schema_version":"airlock.task_policy.v1","task_id":"x","executor":"landlock",
    "limits":{"memory_mb":512,"cpu_seconds":30}})");
  auto lower = parse(
      R"({"schema_version":"airlock.task_policy.v1","executor":"landlock","limits":{"memory_mb":512}})");
  ASSERT_TRUE(one.has_value()) << one.error().message;
  ASSERT_TRUE(lower.has_value()) << lower.error().message;
  auto two = parse_layer_text(
      R"({"schema_version":"airlock.task_policy.v1","task_id":"x","limits":{"cpu_seconds":30}})", *lower,
      "task");
  ASSERT_TRUE(two.has_value()) << two.error().message;
  EXPECT_EQ(digest(*one), digest(*two));
}

TEST(Digest, ChangesWhenAnyValueChanges) {
  const std::string base_digest = digest(builtin_default());
  for (const char* layer : {
           R"({"schema_version":"airlock.task_policy.v1","task_id":"other"})",
           R"({"schema_version":"airlock.task_policy.v1","workspace":"/srv/x"})",
           R"({"schema_version":"airlock.task_policy.v1","workload":"untrusted_code"})",
           R"({"schema_version":"airlock.task_policy.v1","tenancy":"multi_tenant"})",
           R"({"schema_version":"airlock.task_policy.v1","executor":"namespaces"})",
           R"({"schema_version":"airlock.task_policy.v1","readable":["src"]})",
           R"({"schema_version":"airlock.task_policy.v1","write_back_paths":["out"]})",
           R"({"schema_version":"airlock.task_policy.v1","read_only_paths":["/opt"]})",
           R"({"schema_version":"airlock.task_policy.v1","tools":[]})",
           R"({"schema_version":"airlock.task_policy.v1","limits":{"memory_mb":1025}})",
           R"({"schema_version":"airlock.task_policy.v1","limits":{"max_actions_per_minute":121}})",
           R"({"schema_version":"airlock.task_policy.v1","egress":[{"host":"a.example","ports":[443]}]})",
           R"({"schema_version":"airlock.task_policy.v1","code_network":{"mode":"allowlist",
               "rules":[{"cidr":"10.0.0.0/8","ports":[80]}]}})",
       }) {
    auto p = parse(layer);
    ASSERT_TRUE(p.has_value()) << layer << ": " << p.error().message;
    EXPECT_NE(digest(*p), base_digest) << layer;
  }
}

TEST(Digest, ToJsonParsesBackToTheSamePolicy) {
  for (const char* file : {"valid/design_example.json", "valid/code_network_allowlist.json",
                           "valid/key_order_a.json", "valid/minimal.json"}) {
    auto p = parse_fixture(file);
    ASSERT_TRUE(p.has_value()) << file << ": " << p.error().message;
    auto again = parse_layer(to_json(*p), builtin_default());
    ASSERT_TRUE(again.has_value()) << file << ": " << again.error().message;
    EXPECT_EQ(digest(*again), digest(*p)) << file;
  }
}

TEST(BrokerFields, DeniedNamesAddToTheDefaultsAndNeverRemoveThem) {
  auto p = parse(R"({"schema_version":"airlock.task_policy.v1","denied_names":["secrets.yaml", ".env"]})");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  std::vector<std::string> defaults(std::begin(kDefaultDeniedNames), std::end(kDefaultDeniedNames));
  std::sort(defaults.begin(), defaults.end());
  EXPECT_EQ(builtin_default().denied_names, defaults);
  auto with = defaults;
  with.push_back("secrets.yaml");
  std::sort(with.begin(), with.end());
  EXPECT_EQ(p->denied_names, with);
  // .git is no denied name: version control works in the view, its hooks and config are protected.
  EXPECT_FALSE(is_denied_name(p->denied_names, ".git"));
  EXPECT_TRUE(is_denied_name(p->denied_names, ".ENV"));
  EXPECT_TRUE(is_denied_name(p->denied_names, ".env.production"));
  EXPECT_TRUE(is_denied_name(p->denied_names, "id_ed25519"));
  EXPECT_FALSE(is_denied_name(p->denied_names, "environment.txt"));
  for (std::string_view bad : {R"(["a/b"])", R"([".."])", R"([""])", R"([1])"}) {
    auto q = parse(fmt::format(R"({{"schema_version":"airlock.task_policy.v1","denied_names":{}}})", bad));
    ASSERT_FALSE(q.has_value()) << bad;
    EXPECT_EQ(q.error().code, Code::PolicyInvalid) << bad;
  }
}

TEST(BrokerFields, ActionLimitsParseAndRefuseNonsense) {
  auto p = parse(R"({"schema_version":"airlock.task_policy.v1","limits":{"max_read_bytes":10,"max_list_entries":5,
                     "fetch_timeout_seconds":2,"max_output_bytes":100}})");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->limits.max_read_bytes, 10);
  EXPECT_EQ(p->limits.max_list_entries, 5);
  EXPECT_EQ(p->limits.fetch_timeout_seconds, 2);
  EXPECT_EQ(p->limits.max_output_bytes, 100);
  EXPECT_EQ(p->limits.max_write_bytes, 1 << 20);  // untouched: the default
  auto q = parse(R"({"schema_version":"airlock.task_policy.v1","limits":{"max_response_bytes":-1}})");
  ASSERT_FALSE(q.has_value());
  EXPECT_EQ(q.error().facts["path"], "$.limits.max_response_bytes");
}

TEST(BrokerFields, EgressHostWildcards) {
  auto p = parse(R"({"schema_version":"airlock.task_policy.v1","egress":[
    {"host":"*","ports":[443]},{"host":"*.Example.COM.","ports":[443]}]})");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(*p->egress[0].host, "*");
  EXPECT_EQ(*p->egress[1].host, "*.example.com");
  for (std::string_view bad : {"*example.com", "a.*.com", "**"}) {
    auto q = parse(fmt::format(R"({{"schema_version":"airlock.task_policy.v1","egress":[{{"host":"{}","ports":[443]}}]}})", bad));
    EXPECT_FALSE(q.has_value()) << bad;
  }
}

TEST(ToolProtocol, AJsonToolParsesAndRoundTripsWhileArgvToolsKeepTheirDigest) {
  auto p = parse_layer_text(R"({"schema_version": "airlock.task_policy.v1", "tools": [
      {"name": "pay", "argv": ["/bin/sh"], "protocol": "json", "env": ["PAY_REGION"], "max_output_bytes": 4096}]})",
                            builtin_default(), "test");
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->tools[0].protocol, ToolProtocol::Json);
  EXPECT_EQ(p->tools[0].env, std::vector<std::string>{"PAY_REGION"});
  EXPECT_EQ(p->tools[0].max_output_bytes, 4096);
  Json j = to_json(*p);
  EXPECT_EQ(j["tools"][0]["protocol"], "json");
  auto again = parse_layer(j, builtin_default());
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(digest(*again), digest(*p));
  // The default protocol is argv, and a policy that does not name the new fields has the
  // digest it had before they existed.
  EXPECT_EQ(builtin_default().tools[0].protocol, ToolProtocol::Argv);
  EXPECT_FALSE(to_json(builtin_default())["tools"][0].contains("protocol"));
}

TEST(WriteBackMode, OnCloseByDefaultImmediateWhenAskedAndNothingElse) {
  EXPECT_EQ(builtin_default().write_back, WriteBack::OnClose);
  // The default is not written: a policy that does not name write_back keeps its digest.
  EXPECT_FALSE(to_json(builtin_default()).contains("write_back"));
  auto p = parse(R"({"schema_version": "airlock.task_policy.v1", "write_back": "immediate"})");
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_EQ(p->write_back, WriteBack::Immediate);
  Json j = to_json(*p);
  EXPECT_EQ(j["write_back"], "immediate");
  auto again = parse_layer(j, builtin_default());
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(digest(*again), digest(*p));
  EXPECT_NE(digest(*p), digest(builtin_default()));
  auto named = parse(R"({"schema_version": "airlock.task_policy.v1", "write_back": "on_close"})");
  ASSERT_TRUE(named);
  EXPECT_EQ(digest(*named), digest(builtin_default()));
  for (const char* bad : {R"("at_exit")", "true", "1", "null", R"(["immediate"])"}) {
    auto r = parse(std::string(R"({"schema_version": "airlock.task_policy.v1", "write_back": )") + bad + "}");
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, Code::PolicyInvalid) << bad;
    EXPECT_EQ(refusal_path(r), "$.write_back") << bad;
  }
}

}  // namespace
}  // namespace airlock::policy

namespace airlock::policy {
namespace {

std::optional<std::string> by(std::string_view rel, bool is_dir = false) {
  auto e = protected_by(default_protected_paths(), rel, is_dir);
  return e ? std::optional<std::string>(e->pattern) : std::nullopt;
}

TEST(ProtectedPaths, MatchAtAnyDepthAndEverythingBeneath) {
  // .git is an allow-list: everything in it but objects, refs, logs, the index and HEAD.
  for (std::string_view p : {".git/hooks/pre-commit", ".git/config", ".git/commondir", ".git/info/attributes",
                             ".git/rebase-merge/git-rebase-todo", ".git/sequencer/todo", ".git/modules/a/b/config",
                             ".git/modules/a/hooks/x", ".git/worktrees/w/commondir", ".git/anything-new"})
    EXPECT_EQ(by(p), ".git") << p;
  EXPECT_EQ(by("vendor/x/.git/hooks", true), ".git");
  EXPECT_EQ(by("a/.bashrc"), ".bashrc");
  EXPECT_EQ(by(".BashRC"), ".bashrc") << "case does not matter";
  EXPECT_EQ(by(".claude/settings.local.json"), ".claude/settings*.json");
  EXPECT_EQ(by(".claude/settings.json"), ".claude/settings*.json");
  EXPECT_EQ(by(".vscode", true), ".vscode");
  EXPECT_EQ(by(".vscode/tasks.json"), ".vscode");
  // What stays writable: the rest of .git, and names that only look alike.
  for (std::string_view ok : {".git/HEAD", ".git/index", ".git/objects/ab/cd", ".git/refs/heads/main",
                              ".git/logs/HEAD", ".git/config.lock", ".git/modules/a/objects/x", ".git/COMMIT_EDITMSG",
                              "src/config", "hooks/x", ".claude/notes.md", "bashrc", ".bashrc.d"})
    EXPECT_EQ(by(ok), std::nullopt) << ok;
  EXPECT_EQ(by(".git", true), std::nullopt) << "the .git directory itself is not protected";
  EXPECT_EQ(by(".git/objects", true), std::nullopt);
  // A bare repository's directory, judged by the same allow-list.
  EXPECT_TRUE(protected_in_git_dir(default_protected_paths(), "config").has_value());
  EXPECT_TRUE(protected_in_git_dir(default_protected_paths(), "hooks/post-update").has_value());
  EXPECT_FALSE(protected_in_git_dir(default_protected_paths(), "objects/ab/cd").has_value());
  EXPECT_FALSE(protected_in_git_dir(default_protected_paths(), "HEAD").has_value());
  EXPECT_EQ(by("sub/.git", false), ".git") << "a .git file (gitdir:) is";
}

TEST(ProtectedPaths, APolicyAddsEntriesAndRelaxesOnlyByName) {
  auto p = parse_layer_text(R"({"schema_version":"airlock.task_policy.v1","protected_paths":["Makefile", "ci/"],
                               "writable_protected_paths":[".vscode/"]})",
                            builtin_default(), "test");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_TRUE(protected_by(p->protected_paths, "sub/Makefile", false).has_value());
  EXPECT_TRUE(protected_by(p->protected_paths, "ci/run", false).has_value());
  EXPECT_FALSE(protected_by(p->protected_paths, ".vscode/tasks.json", false).has_value());
  EXPECT_EQ(p->writable_protected_paths, (std::vector<std::string>{".vscode"}));
  // The canonical form parses again as the same policy.
  auto again = parse_layer(to_json(*p), builtin_default());
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_EQ(digest(*again), digest(*p));
  EXPECT_NE(digest(*p), digest(builtin_default()));
  EXPECT_EQ(digest(builtin_default()), digest(*parse_layer(to_json(builtin_default()), builtin_default())));

  for (std::string_view bad : {R"("protected_paths":["/abs"])", R"("protected_paths":["a/../b"])",
                               R"("protected_paths":["**"])", R"("protected_paths":[""])",
                               R"("writable_protected_paths":[".not-protected"])", R"("protected_paths":"x")"}) {
    auto q = parse_layer_text(fmt::format(R"({{"schema_version":"airlock.task_policy.v1",{}}})", bad),
                              builtin_default(), "test");
    ASSERT_FALSE(q.has_value()) << bad;
    EXPECT_EQ(q.error().code, Code::PolicyInvalid) << bad;
    EXPECT_TRUE(q.error().facts.value("path", "").starts_with("$.")) << q.error().to_json().dump();
  }
}

}  // namespace
}  // namespace airlock::policy

namespace airlock::policy {
namespace {

// A tool a lower layer (the worker's defaults) holds for approval stays as defined there: a layer
// above (a posted session policy) may neither drop it nor redefine it, so holding the agent's
// credential is not enough to switch the approval off.
TEST(Layers, AToolHeldForApprovalBelowCannotBeDroppedOrRedefinedAbove) {
  auto base = parse_layer_text(R"({"schema_version": "airlock.task_policy.v1", "tools": [
      {"name": "pay", "protocol": "json", "approval": "required", "argv": ["/bin/echo", "pay"]}]})",
                               builtin_default(), "defaults", true);
  ASSERT_TRUE(base) << base.error().message;
  auto other_tools = parse_layer_text(R"({"schema_version": "airlock.task_policy.v1", "tools": [
      {"name": "greet", "argv": ["/bin/echo", "hi"]}]})",
                                      *base, "task");
  ASSERT_TRUE(other_tools) << other_tools.error().message;
  ASSERT_EQ(other_tools->tools.size(), 2u);
  EXPECT_EQ(other_tools->tools[1].name, "pay");
  EXPECT_EQ(other_tools->tools[1].approval, ToolApproval::Required);
  auto same = parse_layer_text(R"({"schema_version": "airlock.task_policy.v1", "tools": [
      {"name": "pay", "protocol": "json", "approval": "required", "argv": ["/bin/echo", "pay"]}]})",
                               *base, "task");
  EXPECT_TRUE(same) << same.error().message;
  for (const char* redefined :
       {R"({"name": "pay", "protocol": "json", "argv": ["/bin/echo", "pay"]})",
        R"({"name": "pay", "protocol": "json", "approval": "none", "argv": ["/bin/echo", "pay"]})",
        R"({"name": "pay", "protocol": "json", "approval": "required", "argv": ["/bin/echo", "other"]})"}) {
    auto r = parse_layer_text(std::string(R"({"schema_version": "airlock.task_policy.v1", "tools": [)") + redefined +
                                  "]}",
                              *base, "task");
    ASSERT_FALSE(r) << redefined;
    EXPECT_EQ(r.error().code, Code::PolicyInvalid);
    EXPECT_NE(r.error().message.find("requires approval in a lower layer"), std::string::npos) << r.error().message;
  }
  // And approval belongs to json tools only.
  auto argv_tool = parse_layer_text(R"({"schema_version": "airlock.task_policy.v1", "tools": [
      {"name": "rm", "approval": "required", "argv": ["/bin/rm"]}]})",
                                    builtin_default(), "task");
  EXPECT_FALSE(argv_tool);
}

}  // namespace
}  // namespace airlock::policy

namespace airlock::policy {
namespace {

// An image is named by digest only: a tag can be moved to other bytes.
TEST(PolicyImage, AnImageIsNamedByDigestAndATagIsRefusedByName) {
  const std::string hex(64, 'a');
  auto parse = [](const std::string& image) {
    return parse_layer_text(R"({"schema_version":"airlock.task_policy.v1","executor":"container","image":")" + image + "\"}",
                            builtin_default(), "test");
  };
  auto ok = parse("localhost/tools@sha256:" + hex);
  ASSERT_TRUE(ok.has_value()) << ok.error().message;
  EXPECT_EQ(*ok->image, "localhost/tools@sha256:" + hex);
  for (const std::string& bad : std::vector<std::string>{"localhost/tools:latest", "localhost/tools", "tools:1@sha256:" + hex,
                          "localhost/tools@sha256:" + hex.substr(1), "localhost/tools@sha512:" + hex,
                          "Localhost/tools@sha256:" + hex, "@sha256:" + hex, "localhost//tools@sha256:" + hex}) {
    SCOPED_TRACE(bad);
    auto r = parse(bad);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, Code::PolicyInvalid);
    EXPECT_EQ(r.error().facts["path"], "$.image");
  }
  EXPECT_NE(parse("localhost/tools:latest").error().message.find("named by digest"), std::string::npos);
  // A policy with an image takes its tools' programs from the image, not from this host.
  auto tool = parse_layer_text(R"({"schema_version":"airlock.task_policy.v1","image":"localhost/t@sha256:)" + hex +
                                   R"(","tools":[{"name":"t","argv":["/opt/only-in-image/tool"]}]})",
                               builtin_default(), "test");
  ASSERT_TRUE(tool.has_value()) << tool.error().message;
  EXPECT_EQ(tool->tools[0].argv[0], "/opt/only-in-image/tool");
  // Without one it is checked here, as always.
  EXPECT_FALSE(parse_layer_text(R"({"schema_version":"airlock.task_policy.v1","tools":[{"name":"t","argv":["/opt/only-in-image/tool"]}]})",
                                builtin_default(), "test")
                   .has_value());
}

}  // namespace
}  // namespace airlock::policy
