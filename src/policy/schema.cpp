// The policy schema's descriptions, one per field, and the check that they cover what the code reads.
#include "policy/schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "policy/task_policy.h"

namespace airlock::policy {

namespace {

template <typename E>
std::string one_of() {
  return "one of: " + enum_name_list<E>();
}

// The fields of an allow-list rule, shared by `egress[]` and `code_network.rules[]`.
void add_rule_fields(std::vector<SchemaField>& f, const std::string& at) {
  f.push_back({at + ".host", "string", "one of `host`, `cidr`",
               "A host name: exact (`pypi.org`), one level of wildcard (`*.example.com`) or `*`. "
               "Exactly one of `host` and `cidr`. Every address the name resolves to is checked."});
  f.push_back({at + ".cidr", "string", "one of `host`, `cidr`",
               "An address range (`127.0.0.1/32`, `10.0.0.0/8`, IPv6 too)."});
  f.push_back({at + ".ports", "array of integers", "required", "The destination ports the rule admits."});
  f.push_back({at + ".schemes", "array of `http`, `https`", "",
               "The schemes the rule admits; an omission admits https only."});
  f.push_back({at + ".allow_private", "boolean", "",
               "Whether a `host` rule may reach non-global addresses (loopback, RFC 1918, link-local, "
               "cloud metadata, CGNAT, ...); without it a name resolving to one is refused."});
}

std::vector<SchemaField> make_fields() {
  std::vector<SchemaField> f = {
      {"schema_version", "string", "required",
       fmt::format("`{}`: required in every layer; this build reads no other version.", kSchemaVersion)},
      {"task_id", "string", "",
       "Names the task in receipts and the run store: at most 128 letters, digits, `_`, `.`, `-`, `:`."},
      {"workspace", "absolute path or null", "",
       "The host directory the session works on (never `/`); null clears one a lower layer set."},
      {"workload", one_of<Workload>(), "",
       "What runs. With `untrusted_code` only a guest kernel of its own (the microvm tier) is enough."},
      {"tenancy", one_of<Tenancy>(), "",
       "Whether the host serves one tenant or several; the planner weighs it."},
      {"executor", one_of<ExecutorKind>(), "",
       "The tier. `auto` takes the first available tier strong enough for the workload; an explicit tier "
       "weaker than the workload needs is `AIRLOCK_ISOLATION_POLICY_INVALID`, one the host cannot provide "
       "`AIRLOCK_EXECUTOR_UNAVAILABLE`. `host` exists only with `--profile development`; `container` parses "
       "but no executor implements it in this build."},
      {"code_network", "object", "", "The network of the code the sandbox runs."},
      {"code_network.mode", one_of<NetworkMode>(), "",
       "`off`: loopback only. `allowlist`: one door out, an HTTP proxy checking `rules` (namespaces tier "
       "only; other tiers refuse such a policy). Setting `off` drops the rules of lower layers."},
      {"code_network.rules", "array of rules", "",
       "The door's allow-list, fields as in `egress[]`: at least one with `allowlist`, none with `off`."},
  };
  add_rule_fields(f, "code_network.rules[]");
  f.push_back({"egress", "array of rules", "",
               "Where the broker's `http_fetch` may go; a layer's list replaces the lower layer's."});
  add_rule_fields(f, "egress[]");
  std::vector<SchemaField> rest = {
      {"readable", "array of workspace-relative paths", "",
       "Copied into the session view; what the command, reads and listings may reach."},
      {"write_back_paths", "array of workspace-relative paths", "",
       "Writable in the view and written back to the workspace on success."},
      {"read_only_paths", "array of absolute host paths", "",
       "Host paths code may read and execute besides the system directories (an agent's install)."},
      {"tools", "array of tools", "",
       "The tools `run_tool` and `airlock tool call` may run; a layer's list replaces the lower layer's."},
      {"tools[].name", "string", "required", "The tool's name, unique in the policy."},
      {"tools[].argv", "array of strings", "required",
       fmt::format("The command. `argv[0]` is an absolute path to an executable file (no PATH lookup; a bare "
                   "name is refused, naming where `{}` has it).",
                   kTrustedPath)},
      {"tools[].allow_args", "boolean", "",
       "Whether a call may append `args`, each one argv entry (never shell text)."},
      {"tools[].timeout_seconds", "integer", "", "Wall time of one call: SIGTERM, then SIGKILL."},
      {"tools[].protocol", one_of<ToolProtocol>(), "`argv`",
       "`json`: the tool-program protocol (one JSON line on stdin, the JSON result on stdout)."},
      {"tools[].env", "array of variable names", "`[]`",
       "Host variables passed through by name when set; `PATH`, `HOME`, `TMPDIR`, `PWD` and `AIRLOCK_*` "
       "are refused."},
      {"tools[].max_output_bytes", "integer", "`1048576`",
       "stdout and stderr together; more stops the tool (`AIRLOCK_OUTPUT_LIMIT`). The smaller of it and "
       "`limits.max_output_bytes` applies."},
      {"tools[].approval", one_of<ToolApproval>(), "`none`",
       "`required`: each call is held (`AIRLOCK_APPROVAL_REQUIRED`, with an approval request id) until a "
       "person approves exactly that call (run, tool, arguments); a `json` tool's only."},
      {"limits", "object", "", "Each field given replaces the lower layer's; the others are kept."},
      {"limits.memory_mb", "integer", "",
       "Memory: `RLIMIT_AS` per process; on the namespaces tier also a cgroup limit on the whole sandbox "
       "(swap at zero); on the microvm tier the guest's RAM."},
      {"limits.cpu_seconds", "integer", "",
       "CPU seconds of each process (`RLIMIT_CPU`); the namespaces tier adds a cgroup CPU share."},
      {"limits.max_processes", "integer", "",
       "Processes alive at once (`RLIMIT_NPROC`, or a pids cgroup; `pids.max` in a guest)."},
      {"limits.command_timeout_seconds", "integer", "",
       "Wall time of one command: SIGTERM, then SIGKILL 2 s later (`AIRLOCK_TOOL_TIMEOUT`)."},
      {"limits.session_budget_seconds", "integer", "",
       "Wall time of the whole session; when spent the command is killed and the session's kill switch "
       "pulled (`AIRLOCK_BUDGET_EXHAUSTED`)."},
      {"limits.max_actions_per_minute", "integer", "",
       "Broker actions in the last minute; more is `AIRLOCK_RATE_LIMITED`."},
      {"limits.max_read_bytes", "integer", "", "Bytes one `read_file` returns (`AIRLOCK_LIMIT_EXCEEDED`)."},
      {"limits.max_write_bytes", "integer", "", "Bytes one `write_file` writes."},
      {"limits.max_list_entries", "integer", "", "Entries one `list_dir` returns."},
      {"limits.max_response_bytes", "integer", "", "Bytes of one `http_fetch` response."},
      {"limits.fetch_timeout_seconds", "integer", "", "Time one `http_fetch` may take."},
      {"limits.max_output_bytes", "integer", "", "A tool's stdout and stderr together."},
      {"denied_names", "array of file names (fnmatch patterns)", "",
       "Names absent from the view and never touched by the broker, at any depth, any case. The built-in "
       "names are always in; a layer's list replaces a lower layer's additions."},
      {"protected_paths", "array of patterns", "absent: the built-in list only",
       "Workspace paths kept read-only inside and refused at write-back, added to those in force (the "
       "built-in list, `defaults/protected-paths.json`, and lower layers'). `airlock plan` shows them all."},
      {"writable_protected_paths", "array of patterns", "absent: none",
       "Each takes one protected path in force away, by its exact pattern: a relaxation the plan records. "
       "A pattern not in force is refused."},
      {"agent", "object", "absent: the values below",
       "What `airlock agent run` may ask of the agent CLI, field by field over the lower layer. Nothing "
       "here can ask for a bypass."},
      {"agent.model", "string or null", "`null`",
       "The model airlock passes; any other is refused (`AIRLOCK_BYPASS_REFUSED`); null: any `--model` is "
       "refused."},
      {"agent.resume", "boolean", "`false`", "Whether the profile's resume flags and commands are allowed."},
      {"agent.continue", "boolean", "`false`", "Whether its continue flags are allowed."},
      {"agent.executable_sha256", "64 lower-case hex digits", "absent: not pinned",
       "Pins the agent's executable (after links): a mismatch is `AIRLOCK_CUSTODY_UNSAFE`."},
      {"agent.airlock_sha256", "64 lower-case hex digits", "absent: not pinned",
       "Pins airlock's own binary."},
      {"confinement", one_of<Confinement>(), "`engine`",
       "Who confines an agent run: airlock, or the agent's own sandbox (airlock then records that it makes "
       "no claim the agent is confined). Only the worker layer (`--defaults`) may set it."},
      {"write_back", one_of<WriteBack>(), "`on_close`",
       "When a session's changes land: when it closes normally, or as each `write_file` and tool run "
       "completes."},
      {"machine_isolation", one_of<MachineIsolation>(), "`none`",
       "For `airlock run --machine`: the isolation that machine must have been attested at, within 7 days and "
       "with the airlock installed there (`airlock machine attest`): `brokered` (attested at all), "
       "`sandboxed` (its Landlock or namespaces tier contained every escape row), `isolated` (its microVM "
       "tier did). Anything less is `AIRLOCK_EXECUTOR_UNAVAILABLE`, naming the level found."},
      {"image", "string", "none",
       "The OCI image the `container` tier runs every command and tool in, named by digest: "
       "`NAME@sha256:<64 hex digits>` (`airlock image build` makes one and prints it). A tag is refused. With an "
       "image, a tool's program is the image's: it is not looked for on this host. The image must have passed "
       "`airlock image build`'s (or the doctor's) one-shot check on this host, or the tier is "
       "`AIRLOCK_EXECUTOR_UNAVAILABLE` naming the digest."},
  };
  f.insert(f.end(), rest.begin(), rest.end());
  return f;
}

void collect(const Json& j, const std::string& at, std::vector<std::string>& out) {
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      std::string path = at.empty() ? key : at + "." + key;
      out.push_back(path);
      collect(value, path, out);
    }
  } else if (j.is_array()) {
    for (const auto& item : j)
      if (item.is_object()) collect(item, at + "[]", out);
  }
}

}  // namespace

std::span<const SchemaField> schema_fields() {
  static const std::vector<SchemaField> fields = make_fields();
  return fields;
}

Json schema_example() {
  const Json rule = {
      {"host", "pypi.org"}, {"ports", {443}}, {"schemes", {"https"}}, {"allow_private", false}};
  const Json cidr_rule = {{"cidr", "127.0.0.1/32"}, {"ports", {8080}}, {"schemes", {"http"}}};
  return {
      {"schema_version", kSchemaVersion},
      {"task_id", "t-1"},
      {"workspace", "/srv/work"},
      {"workload", "trusted_toolchain"},
      {"tenancy", "single_tenant"},
      {"executor", "auto"},
      {"code_network", {{"mode", "allowlist"}, {"rules", {rule, cidr_rule}}}},
      {"egress", {rule, cidr_rule}},
      {"readable", {"."}},
      {"write_back_paths", {"out"}},
      {"read_only_paths", {"/opt"}},
      {"tools",
       {{{"name", "t"},
         {"argv", {"/bin/true"}},
         {"allow_args", false},
         {"timeout_seconds", 5},
         {"protocol", "json"},
         {"env", {"LANG_X"}},
         {"max_output_bytes", 4096},
         {"approval", "required"}}}},
      {"limits",
       {{"memory_mb", 64},
        {"cpu_seconds", 5},
        {"max_processes", 8},
        {"command_timeout_seconds", 5},
        {"session_budget_seconds", 60},
        {"max_actions_per_minute", 10},
        {"max_read_bytes", 10},
        {"max_write_bytes", 10},
        {"max_list_entries", 10},
        {"max_response_bytes", 10},
        {"fetch_timeout_seconds", 5},
        {"max_output_bytes", 10}}},
      {"denied_names", {"*.key"}},
      {"protected_paths", {"Makefile"}},
      {"writable_protected_paths", {".envrc"}},
      {"agent",
       {{"model", "m"},
        {"resume", true},
        {"continue", true},
        {"executable_sha256", std::string(64, 'a')},
        {"airlock_sha256", std::string(64, 'b')}}},
      {"confinement", "vendor"},
      {"write_back", "immediate"},
      {"machine_isolation", "sandboxed"},
      {"image", "localhost/tools@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
  };
}

std::vector<std::string> json_field_paths(const Json& j) {
  std::vector<std::string> out;
  collect(j, "", out);
  return out;
}

std::vector<std::string> schema_problems() {
  std::vector<std::string> problems;
  std::set<std::string> seen;
  for (const Json& doc : {to_json(builtin_default()), Json()}) {
    Json j = doc;
    if (j.is_null()) {
      // The example, parsed as the worker's layer (the only one that may set confinement).
      auto p = parse_layer(schema_example(), builtin_default(), true);
      if (!p) {
        problems.push_back("the schema example does not parse: " + p.error().message);
        continue;
      }
      j = to_json(*p);
    }
    for (auto& path : json_field_paths(j)) seen.insert(path);
  }
  std::set<std::string> described;
  for (const auto& f : schema_fields()) described.insert(f.path);
  for (const auto& path : seen)
    if (!described.contains(path)) problems.push_back("undescribed: " + path);
  for (const auto& path : described)
    if (!seen.contains(path)) problems.push_back("stale: " + path);
  return problems;
}

}  // namespace airlock::policy
