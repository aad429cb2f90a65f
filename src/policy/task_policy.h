// Task policy airlock.task_policy.v1: the model, strict parse, layering, canonical digest.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/enum_names.h"
#include "base/error.h"
#include "base/json_util.h"
#include "policy/protected_paths.h"

namespace airlock::policy {

inline constexpr std::string_view kSchemaVersion = "airlock.task_policy.v1";
// The fixed PATH a tool's argv[0] is resolved against: never the caller's PATH.
inline constexpr std::string_view kTrustedPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#define AIRLOCK_WORKLOADS(X) X(TrustedToolchain, "trusted_toolchain") X(UntrustedCode, "untrusted_code")
AIRLOCK_ENUM(Workload, AIRLOCK_WORKLOADS)
#define AIRLOCK_TENANCIES(X) X(SingleTenant, "single_tenant") X(MultiTenant, "multi_tenant")
AIRLOCK_ENUM(Tenancy, AIRLOCK_TENANCIES)
#define AIRLOCK_EXECUTOR_KINDS(X)                                                                  \
  X(Auto, "auto") X(Host, "host") X(Landlock, "landlock") X(Namespaces, "namespaces") X(Microvm, "microvm") \
  X(Container, "container")
AIRLOCK_ENUM(ExecutorKind, AIRLOCK_EXECUTOR_KINDS)
#define AIRLOCK_NETWORK_MODES(X) X(Off, "off") X(Allowlist, "allowlist")
AIRLOCK_ENUM(NetworkMode, AIRLOCK_NETWORK_MODES)
// How airlock talks to a tool: plain argv/stdout, or the tool-program protocol (one JSON line
// on stdin, the JSON result on stdout; see exec/tool_program.h).
#define AIRLOCK_TOOL_PROTOCOLS(X) X(Argv, "argv") X(Json, "json")
AIRLOCK_ENUM(ToolProtocol, AIRLOCK_TOOL_PROTOCOLS)
// Whether a call waits for a person: "required" holds each call until an approval bound to that
// exact call (run, tool, arguments) is given (broker/approvals.h). A json-protocol tool's only.
#define AIRLOCK_TOOL_APPROVALS(X) X(None, "none") X(Required, "required")
AIRLOCK_ENUM(ToolApproval, AIRLOCK_TOOL_APPROVALS)


// One allow-list rule: a host name or a CIDR range, with ports and schemes.
struct EgressRule {
  std::optional<std::string> host;
  std::optional<std::string> cidr;
  std::vector<int> ports;
  std::vector<std::string> schemes;
  bool allow_private = false;
};

struct CodeNetwork {
  NetworkMode mode = NetworkMode::Off;
  std::vector<EgressRule> rules;
};

struct Tool {
  std::string name;
  std::vector<std::string> argv;  // argv[0] is the absolute path resolved at load
  bool allow_args = false;
  int timeout_seconds = 300;
  ToolProtocol protocol = ToolProtocol::Argv;
  std::vector<std::string> env = {};  // host variables passed through by name, if set
  int64_t max_output_bytes = 1 << 20;  // stdout and stderr together; more stops the tool
  ToolApproval approval = ToolApproval::None;
};

struct Limits {
  int64_t memory_mb = 1024;
  int cpu_seconds = 300;          // CPU time of each process (RLIMIT_CPU); level 2 adds a cgroup CPU share
  int max_processes = 256;        // tasks alive at once
  int command_timeout_seconds = 300;
  int session_budget_seconds = 1800;
  int max_actions_per_minute = 120;
  // What one broker action may move: a read_file, a write_file, a list_dir, an http_fetch
  // response, a tool's captured output.
  int64_t max_read_bytes = 1 << 20;
  int64_t max_write_bytes = 1 << 20;
  int max_list_entries = 1000;
  int64_t max_response_bytes = 1 << 20;
  int fetch_timeout_seconds = 30;
  int64_t max_output_bytes = 1 << 20;
};

// Names no route reaches, at any depth: absent from the session view (so no command, on any
// tier, can read them), never read, written or listed by the broker, never written back. A name
// may use fnmatch's * ? [..] and matches without regard to case. A policy's `denied_names` adds
// to these; it cannot take one away. `.git` is not here: version control works in the view, its
// hooks and configuration are protected paths (policy/protected_paths.h).
inline constexpr std::string_view kDefaultDeniedNames[] = {
    ".env",    ".env.*",     ".netrc",     ".ssh",   ".gnupg", ".aws", ".docker", ".git-credentials",
    ".pgpass", "id_rsa", "id_ecdsa", "id_ed25519", "id_dsa"};

// Whether the file name `name` (one component) is one of `denied_names`.
bool is_denied_name(const std::vector<std::string>& denied_names, std::string_view name);

// What an agent run (`airlock agent run`) may ask of the agent CLI. Nothing here can ask for a
// bypass: the profile's bypass arguments are refused whatever the policy says.
struct AgentPolicy {
  std::optional<std::string> model;  // passed as the profile's model flag; any other model is refused
  bool resume = false;               // the profile's resume flags or commands are allowed
  bool continue_session = false;     // its continue flags are allowed ("continue" in JSON)
  // Pinned sha256 (64 lower-case hex digits) of the agent's executable and of airlock itself:
  // a mismatch is refused (AIRLOCK_CUSTODY_UNSAFE) before anything starts.
  std::optional<std::string> executable_sha256;
  std::optional<std::string> airlock_sha256;
  bool operator==(const AgentPolicy&) const = default;
};

// Who confines an agent run: airlock (engine), or the agent tool's own sandbox (vendor), in
// which case airlock records that it makes no claim the agent is confined. A worker setting:
// only the worker's defaults layer may set it.
#define AIRLOCK_CONFINEMENTS(X) X(Engine, "engine") X(Vendor, "vendor")
AIRLOCK_ENUM(Confinement, AIRLOCK_CONFINEMENTS)

// When a session's changes reach the workspace: when it closes normally (on_close, the
// default), or as each write_file and each tool run completes (immediate), for clients whose
// end airlock cannot see. The same write-back rules and refusals apply either way.
#define AIRLOCK_WRITE_BACKS(X) X(OnClose, "on_close") X(Immediate, "immediate")
AIRLOCK_ENUM(WriteBack, AIRLOCK_WRITE_BACKS)

// The isolation a machine must have been attested at (`airlock machine attest`) for a run to be
// dispatched to it (`airlock run --machine`): none asks for no attestation; brokered, that the
// machine was attested at all; sandboxed, that its Landlock or namespaces tier contained every
// escape row; isolated, that its microVM tier did. Ordered: each asks for more than the last.
#define AIRLOCK_MACHINE_ISOLATIONS(X) \
  X(None, "none") X(Brokered, "brokered") X(Sandboxed, "sandboxed") X(Isolated, "isolated")
AIRLOCK_ENUM(MachineIsolation, AIRLOCK_MACHINE_ISOLATIONS)

struct TaskPolicy {
  std::string task_id = "default";
  std::optional<std::string> workspace;  // absolute, normalised
  Workload workload = Workload::TrustedToolchain;
  Tenancy tenancy = Tenancy::SingleTenant;
  ExecutorKind executor = ExecutorKind::Auto;
  CodeNetwork code_network;
  std::vector<EgressRule> egress;
  std::vector<std::string> readable = {"."};
  std::vector<std::string> write_back_paths = {"."};
  std::vector<std::string> read_only_paths;  // extra absolute host paths readable by code
  std::vector<std::string> denied_names;     // the defaults plus the policy's own, sorted
  // In force: the built-in list plus the policy's `protected_paths`, less its
  // `writable_protected_paths` (each a named relaxation, recorded in the plan).
  std::vector<ProtectedPath> protected_paths;
  std::vector<std::string> writable_protected_paths;
  std::vector<Tool> tools;
  Limits limits;
  AgentPolicy agent;
  Confinement confinement = Confinement::Engine;
  WriteBack write_back = WriteBack::OnClose;
  MachineIsolation machine_isolation = MachineIsolation::None;
  // The OCI image the container tier runs every command in, named by digest only:
  // "NAME@sha256:<64 hex>" (policy::ImageRef). Other tiers do not read it.
  std::optional<std::string> image;
};

// An image named by digest: "NAME@sha256:<64 lower-case hex digits>". A tag alone (or with the
// digest) is refused: a tag can be moved to other bytes, a digest cannot.
struct ImageRef {
  std::string name;    // "localhost/tools"
  std::string digest;  // "sha256:..."
  std::string text() const { return name + "@" + digest; }
};
// Parses `text`; AIRLOCK_POLICY_INVALID at `path` when it is not NAME@sha256:HEX.
Result<ImageRef> parse_image_ref(std::string_view text, const std::string& path = "$.image");

// The built-in default: trusted toolchain, one tenant, executor auto, no egress,
// no network for code, one declared shell tool.
TaskPolicy builtin_default();

// Strict parse of one layer: unknown keys, wrong types, unknown enum values or schema
// versions are AIRLOCK_POLICY_INVALID with the JSON path in facts.path. `layer` is the
// base the document overrides (fields it omits keep the base's value).
// `worker_layer`: the document is the worker's defaults, the one layer that may set `confinement`.
Result<TaskPolicy> parse_layer(const Json& doc, const TaskPolicy& base, bool worker_layer = false);

// Parses JSON text as a layer over `base`.
Result<TaskPolicy> parse_layer_text(std::string_view text, const TaskPolicy& base,
                                    std::string_view source_name, bool worker_layer = false);

// built-in default < worker defaults (optional file) < task policy (optional file).
Result<TaskPolicy> load_effective(const std::optional<std::string>& defaults_file,
                                  const std::optional<std::string>& task_file);

// The effective policy as canonical JSON (every field present), and its sha256.
Json to_json(const TaskPolicy& p);
// A tool as the policy's JSON writes it (fields at their defaults left out): what an approval
// binds by digest besides the call's arguments.
Json to_json(const Tool& t);
// Rules as the policy writes them (they parse again as a policy's rules).
Json to_json(const EgressRule& r);
Json to_json(const std::vector<EgressRule>& rules);
std::string digest(const TaskPolicy& p);

// Resolves a program name against kTrustedPath (absolute paths are checked as given).
Result<std::string> resolve_trusted(const std::string& program);

}  // namespace airlock::policy
