// The tool-program protocol: one JSON line in on stdin, the JSON result out on stdout, in a fresh
// working directory, with per-call credentials, every dispatch recorded before and after.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "base/effect_record.h"
#include "base/error.h"
#include "base/json_util.h"
#include "base/unique_fd.h"
#include "exec/captured_run.h"
#include "exec/executor.h"
#include "policy/task_policy.h"

namespace airlock::exec {

// One call of a declared tool.
struct ToolCall {
  const policy::Tool* tool = nullptr;  // the policy's declaration; must outlive the call
  Json args;
  std::string idempotency_key;
  std::string run_id;
  std::string span;
  uint64_t timeout_ms = 0;        // 0: the tool's own timeout (a session bounds it by its budget)
  uint64_t max_output_bytes = 0;  // 0: the tool's own cap (a session bounds it by the policy's)
  std::string approval_id = {};   // recorded on the intent: the approval this dispatch used
};

// How the credentials reach the program: a pipe it inherits as descriptor 3 (named by
// AIRLOCK_CREDENTIALS_FD=3; nothing else can read it and it is gone when read), or the
// variable AIRLOCK_CREDENTIALS (visible in /proc/<pid>/environ to whatever can read that).
enum class CredentialDelivery { Pipe, Env };

// Mints fresh credentials for one dispatch. The host configures it; the credentials exist only
// in memory and in what is handed to that one call, never in airlock's own environment.
struct CredentialProvider {
  std::function<Result<std::string>(const ToolCall&)> mint;
  CredentialDelivery delivery = CredentialDelivery::Pipe;
};

// A provider that runs `/bin/sh -c command` on the host for every dispatch, with airlock's
// environment plus AIRLOCK_TOOL, AIRLOCK_IDEMPOTENCY_KEY and AIRLOCK_RUN_ID; its stdout is the
// credential. A non-zero exit, or nothing within 30 s, is AIRLOCK_CONFIG_ERROR.
CredentialProvider credentials_from_command(std::string command, CredentialDelivery delivery);

// A pipe holding `secret` whose write end is already closed: the program reads it to end of
// file, and no copy of the write end can keep it open. At most 60 KiB (what a pipe holds).
Result<UniqueFd> secret_pipe(std::string_view secret);

using airlock::DispatchRecorder;

struct ToolCallResult {
  Json result;  // the program's stdout as JSON; null when it wrote nothing
  std::string attempt_id;
  std::string workdir;  // host path; removed before this returns
  RunOutcome outcome;
};

// Calls a `"protocol": "json"` tool on `executor` (whose session directories are `dirs`).
// Before the dispatch: a fresh empty working directory under the scratch directory, fresh
// credentials from `credentials` (if given), and the intent recorded (a failure refuses the
// call with AIRLOCK_LEDGER_WRITE_FAILED and nothing runs). The program gets
// {"tool", "args", "idempotencyKey"} (the isolated-executor design's spelling) as one line on stdin, the executor's allow-listed
// environment plus the tool's `env` names that are set in airlock's environment, AIRLOCK_TOOL
// and AIRLOCK_IDEMPOTENCY_KEY, the tool's timeout (SIGTERM, then SIGKILL) and output cap.
// Afterwards the working directory is removed and the outcome recorded, ok or not. Errors:
// AIRLOCK_TOOL_TIMEOUT, AIRLOCK_OUTPUT_LIMIT, AIRLOCK_TOOL_FAILED (non-zero exit or signal;
// facts.stderr_tail), AIRLOCK_PROTOCOL_ERROR (stdout not JSON), AIRLOCK_SESSION_KILLED;
// facts carry attempt_id and workdir.
Result<ToolCallResult> call_tool_program(Executor& executor, const SessionDirs& dirs, const ToolCall& call,
                                         DispatchRecorder& recorder, const CredentialProvider* credentials);

// The protocol's reading of stdout: trimmed; empty is null; otherwise strict UTF-8 and one JSON
// value, or AIRLOCK_PROTOCOL_ERROR.
Result<Json> parse_tool_output(std::string_view stdout_bytes);

}  // namespace airlock::exec
