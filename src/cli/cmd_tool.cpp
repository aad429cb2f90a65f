// `airlock tool call`: one dispatch of a json-protocol tool, end to end: plan, executor, run
// keying, idempotency key, credentials, effect ledger, result on stdout.
#include <sys/stat.h>

#include <cstdio>

#include "base/fs.h"
#include "base/hash.h"
#include "cli/verbs.h"
#include "exec/owned_executor.h"
#include "exec/tool_program.h"
#include "ledger/effect_ledger.h"
#include "ledger/idempotency.h"
#include "linux/probe.h"

namespace airlock::cli {
namespace {

struct ToolOptions {
  std::optional<std::string> policy_file, defaults, workspace, run_file, run_id, credentials_command;
  std::string tool, args = "{}", ledger, span;
  uint64_t step = 0;
  uint32_t ordinal = 0;
  bool credentials_env = false, fsync = false, single_record = false, quiet = false;
};

// A run file holds the run's keying: made at a fresh start, read back (never re-minted) on resume.
Result<ledger::RunKeying> load_or_start_run(const ToolOptions& o) {
  if (!o.run_file) return ledger::start_run(o.run_id.value_or(random_id()));
  struct stat st{};
  if (::stat(o.run_file->c_str(), &st) == 0) {
    auto text = TRY(read_file(*o.run_file, Code::IoError));
    auto j = TRY(parse_json(text, Code::LedgerCorrupt, *o.run_file));
    return ledger::RunKeying::from_json(j);
  }
  auto run = ledger::start_run(o.run_id.value_or(random_id()));
  TRY(write_file_atomic(*o.run_file, run.to_json().dump() + "\n", 0600));
  return run;
}

int tool_call(Globals& g, const ToolOptions& o) {
  auto basics = prepare_session(g, o.defaults, o.policy_file, false, o.workspace);  // discovery, as for run
  if (!basics) return refuse(basics.error(), g.json);
  const policy::TaskPolicy* pol = &basics->policy;
  const policy::Tool* tool = nullptr;
  for (const auto& t : pol->tools)
    if (t.name == o.tool) tool = &t;
  if (!tool)
    return refuse({Code::ToolNotDeclared, fmt::format("the policy declares no tool \"{}\"", o.tool), {{"tool", o.tool}}},
                  g.json);
  auto args = parse_json(o.args, Code::ToolArgsDenied, "--args");
  if (!args) return refuse(args.error(), g.json);
  auto run = load_or_start_run(o);
  if (!run) return refuse(run.error(), g.json);
  auto key = ledger::derive_key(*run, {o.step, o.ordinal}, tool->name, *args);
  if (!key) return refuse(key.error(), g.json);

  auto led = ledger::EffectLedger::open(o.ledger, {.intents = !o.single_record, .fsync = o.fsync});
  if (!led) return refuse(led.error(), g.json);
  auto ex = exec::open_owned_executor(*pol, basics->facts, basics->profile,
                                      basics->state_dir, o.workspace);
  if (!ex) return refuse(ex.error(), g.json);
  if (!o.quiet && !g.json)
    std::fprintf(stderr, "airlock: tool %s on the %s executor, key %s\n", tool->name.c_str(),
                 std::string(policy::to_string(ex->plan.executor())).c_str(),
                 key->c_str());

  std::optional<exec::CredentialProvider> creds;
  if (o.credentials_command)
    creds = exec::credentials_from_command(
        *o.credentials_command, o.credentials_env ? exec::CredentialDelivery::Env : exec::CredentialDelivery::Pipe);
  exec::ToolCall call{tool, *args, *key, run->run_id, o.span.empty() ? fmt::format("step-{}.{}", o.step, o.ordinal) : o.span};
  auto r = exec::call_tool_program(*ex->executor, ex->dirs, call, *led, creds ? &*creds : nullptr);
  if (!r) return refuse(r.error(), g.json);
  if (g.json)
    std::printf("%s\n", Json({{"result", r->result},
                              {"idempotency_key", *key},
                              {"attempt_id", r->attempt_id},
                              {"workdir", r->workdir},
                              {"run", run->to_json()},
                              {"outcome", r->outcome.to_json()}})
                            .dump()
                            .c_str());
  else
    std::printf("%s\n", r->result.dump().c_str());
  return 0;
}

}  // namespace

void add_tool(CLI::App& app, Globals& g, Action& run) {
  static ToolOptions o;
  auto* tool = app.add_subcommand("tool", "call declared tools");
  tool->require_subcommand(1);
  auto* call = tool->add_subcommand("call", "call a \"protocol\": \"json\" tool once, recorded in an effect ledger");
  call->add_option("--policy", o.policy_file, "task policy (JSON)");
  call->add_option("--defaults", o.defaults, "worker default policy");
  call->add_option("--workspace", o.workspace, "workspace directory");
  call->add_option("--tool", o.tool, "the declared tool's name")->required();
  call->add_option("--args", o.args, "the arguments, as JSON (default {})");
  call->add_option("--ledger", o.ledger, "the effect ledger (JSONL), created if missing")->required();
  call->add_flag("--ledger-fsync", o.fsync, "fdatasync each intent: survive power loss, not only a crash");
  call->add_flag("--single-record", o.single_record, "record each dispatch as one line after it (no intent)");
  call->add_option("--run", o.run_file, "run file: created at a fresh start (new generation), read on resume");
  call->add_option("--run-id", o.run_id, "the run id for a fresh start (default: random)");
  call->add_option("--step", o.step, "the calling step's sequence number");
  call->add_option("--ordinal", o.ordinal, "the call's ordinal within its step");
  call->add_option("--span", o.span, "span id recorded with the intent (default step-N.K)");
  call->add_option("--credentials-command", o.credentials_command,
                   "host command run per dispatch; its stdout is handed to the tool as fresh credentials");
  call->add_flag("--credentials-env", o.credentials_env,
                 "hand credentials as AIRLOCK_CREDENTIALS instead of the pipe on descriptor 3");
  call->add_flag("--json", g.json, "print the result with its key, attempt and outcome as JSON");
  call->add_flag("-q,--quiet", o.quiet, "print nothing of airlock's own unless refused");
  call->callback([&g, &run] { run = [&g] { return tool_call(g, o); }; });
}

}  // namespace airlock::cli
