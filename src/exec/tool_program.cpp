// The tool-program protocol: workdir, credentials, intent, dispatch through run_captured,
// classification of how it ended, cleanup, outcome.
#include "exec/tool_program.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/clock.h"
#include "base/encoding.h"
#include "base/fs.h"
#include "base/hash.h"
#include "base/unique_fd.h"

extern char** environ;

namespace airlock::exec {
namespace {

// Runs the host's credential command and returns its stdout.
Result<std::string> run_credential_command(const std::string& command, const ToolCall& call) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  env.push_back("AIRLOCK_TOOL=" + call.tool->name);
  env.push_back("AIRLOCK_IDEMPOTENCY_KEY=" + call.idempotency_key);
  env.push_back("AIRLOCK_RUN_ID=" + call.run_id);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string sh = "/bin/sh", dash_c = "-c", cmd = command;
  char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};

  int p[2];
  if (::pipe2(p, O_CLOEXEC) < 0) return fail_errno(Code::IoError, "pipe2 for the credential provider", errno);
  UniqueFd rd(p[0]), wr(p[1]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, wr.get(), 1);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, "/bin/sh", &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  wr.reset();
  if (rc != 0) return fail_errno(Code::IoError, "start the credential provider", rc);
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool timed_out = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd pfd{rd.get(), POLLIN, 0};
    int r = left.count() > 0 ? ::poll(&pfd, 1, static_cast<int>(left.count())) : 0;
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    char buf[4096];
    ssize_t n = ::read(rd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (timed_out || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    ::explicit_bzero(out.data(), out.size());
    return fail(Code::ConfigError,
                timed_out ? "the credential provider gave nothing within 30 s"
                          : fmt::format("the credential provider failed (status {})",
                                        WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st)),
                {{"tool", call.tool->name}});
  }
  return out;
}

std::string trim(std::string_view s) {
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return std::string(s);
}

// How a finished run becomes the call's result or error.
Result<Json> classify(const CapturedRun& cap, const policy::Tool& tool, uint64_t timeout_ms, size_t max_bytes) {
  const RunOutcome& o = cap.outcome;
  if (cap.output_limited)
    return fail(Code::OutputLimit, fmt::format("{} wrote more than {} bytes and was stopped", tool.name, max_bytes),
                {{"max_output_bytes", max_bytes}});
  if (o.timed_out)
    return fail(Code::ToolTimeout, fmt::format("{} ran past {} ms and was killed", tool.name, timeout_ms),
                {{"timeout_ms", timeout_ms}});
  if (o.stopped) return fail(Code::SessionKilled, fmt::format("{} was stopped", tool.name));
  if (o.status.signaled || o.status.code != 0)
    return fail(Code::ToolFailed,
                fmt::format("{} {}", tool.name,
                            o.status.signaled ? fmt::format("was killed by signal {}", o.status.signal)
                                              : fmt::format("exited with status {}", o.status.code)),
                {{"exit_code", o.status.signaled ? Json(nullptr) : Json(o.status.code)},
                 {"signal", o.status.signaled ? Json(o.status.signal) : Json(nullptr)},
                 {"stderr_tail", is_valid_utf8(cap.err_tail) ? Json(cap.err_tail) : Json(base64_encode(cap.err_tail))},
                 {"stderr_tail_encoding", is_valid_utf8(cap.err_tail) ? "utf-8" : "base64"}});
  return parse_tool_output(cap.out);
}

}  // namespace

Result<Json> parse_tool_output(std::string_view stdout_bytes) {
  std::string t = trim(stdout_bytes);
  if (t.empty()) return Json(nullptr);
  Json facts = {{"stdout_bytes", stdout_bytes.size()}, {"stdout_sha256", sha256_hex(stdout_bytes)}};
  if (!is_valid_utf8(t)) return fail(Code::ProtocolError, "the tool's stdout is not valid UTF-8", facts);
  // Bounded: a tool that prints JSON nested a million deep must not crash whoever prints it next.
  auto j = parse_json(t, Code::ProtocolError, "the tool's stdout");
  if (!j) {
    facts["stdout_head"] = lossy_utf8(t.substr(0, 200));  // a cut may split a character
    for (const char* k : {"path", "max_depth"})
      if (j.error().facts.contains(k)) facts[k] = j.error().facts[k];
    return fail(Code::ProtocolError, fmt::format("the tool's stdout is not one JSON value: {}", j.error().message),
                facts);
  }
  return std::move(*j);
}

// A pipe holding `secret` whose write end is already closed: the program reads it to end of
// file, and no copy of the write end (the supervisor inherits ours) can keep it open.
Result<UniqueFd> secret_pipe(std::string_view secret) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) < 0) return fail_errno(Code::IoError, "pipe2 for credentials", errno);
  UniqueFd rd(p[0]), wr(p[1]);
  if (secret.size() > 60 * 1024)
    return fail(Code::ConfigError, "the credentials are larger than 60 KiB, more than a pipe holds",
                {{"bytes", secret.size()}});
  TRY(write_all(wr.get(), secret, Code::IoError, "write credentials"));
  return rd;
}

CredentialProvider credentials_from_command(std::string command, CredentialDelivery delivery) {
  return {[command = std::move(command)](const ToolCall& call) { return run_credential_command(command, call); },
          delivery};
}

Result<ToolCallResult> call_tool_program(Executor& executor, const SessionDirs& dirs, const ToolCall& call,
                                         DispatchRecorder& recorder, const CredentialProvider* credentials) {
  const policy::Tool& tool = *call.tool;
  if (tool.protocol != policy::ToolProtocol::Json)
    return fail(Code::ToolArgsDenied, fmt::format("{} does not speak the json tool protocol", tool.name),
                {{"tool", tool.name}});
  std::string line;
  try {
    line = canonical_json({{"tool", tool.name}, {"args", call.args}, {"idempotencyKey", call.idempotency_key}});
  } catch (const Json::exception& e) {
    return fail(Code::ToolArgsDenied, fmt::format("the arguments cannot be sent as JSON: {}", e.what()));
  }
  line += "\n";

  EffectIntent intent;
  intent.attempt_id = random_id();
  intent.key = call.idempotency_key;
  intent.tool = tool.name;
  intent.args_hash = sha256_hex(canonical_json(call.args));
  intent.run_id = call.run_id;
  intent.span = call.span;
  intent.approval_id = call.approval_id;
  intent.workdir = dirs.scratch + "/call-" + intent.attempt_id;
  Json where = {{"tool", tool.name}, {"attempt_id", intent.attempt_id}, {"workdir", intent.workdir}};
  auto with_where = [&](Error e) {
    for (auto& [k, v] : where.items()) e.facts[k] = v;
    return e;
  };

  if (::mkdir(intent.workdir.c_str(), 0700) < 0)
    return std::unexpected(with_where(fail_errno(Code::ExecutorUnavailable, "mkdir " + intent.workdir, errno).error()));
  // Removed on every path out; before the outcome is recorded on the normal one.
  struct RemoveWorkdir {
    std::string path;
    void now() {
      if (!path.empty()) (void)remove_tree(path);
      path.clear();
    }
    ~RemoveWorkdir() { now(); }
  } remove_workdir{intent.workdir};

  Command cmd;
  cmd.argv = tool.argv;
  cmd.cwd = intent.workdir;
  cmd.timeout_ms = call.timeout_ms ? call.timeout_ms : static_cast<uint64_t>(tool.timeout_seconds) * 1000;
  const auto max_bytes = static_cast<size_t>(call.max_output_bytes ? call.max_output_bytes : tool.max_output_bytes);
  for (const auto& name : tool.env)
    if (const char* v = ::getenv(name.c_str())) cmd.env.push_back(name + "=" + v);
  cmd.env.push_back("AIRLOCK_TOOL=" + tool.name);
  cmd.env.push_back("AIRLOCK_IDEMPOTENCY_KEY=" + call.idempotency_key);
  UniqueFd secret;
  std::optional<size_t> secret_env;  // index in cmd.env, wiped after the run
  if (credentials) {
    auto minted = credentials->mint(call);
    if (!minted) return std::unexpected(with_where(std::move(minted).error()));
    if (credentials->delivery == CredentialDelivery::Pipe) {
      auto fd = secret_pipe(*minted);
      ::explicit_bzero(minted->data(), minted->size());
      if (!fd) return std::unexpected(with_where(std::move(fd).error()));
      secret = std::move(*fd);
      cmd.pass_fd = secret.get();
      cmd.env.push_back("AIRLOCK_CREDENTIALS_FD=3");
    } else {
      secret_env = cmd.env.size();
      cmd.env.push_back("AIRLOCK_CREDENTIALS=" + *minted);
      ::explicit_bzero(minted->data(), minted->size());
    }
  }

  // Phase one, before anything runs: no record, no effect.
  intent.started_at = now_ms();
  if (auto r = recorder.intent(intent); !r) {
    Error e = with_where(std::move(r).error());
    e.code = Code::LedgerWriteFailed;
    return std::unexpected(e.context("the intent could not be recorded, so the tool was not run"));
  }
  auto t0 = std::chrono::steady_clock::now();
  auto cap = run_captured(executor, cmd, line, max_bytes);
  if (secret_env) ::explicit_bzero(cmd.env[*secret_env].data(), cmd.env[*secret_env].size());
  secret.reset();
  Result<Json> result = cap ? classify(*cap, tool, cmd.timeout_ms.value_or(0), max_bytes) : std::unexpected(cap.error());
  remove_workdir.now();

  EffectOutcome out;
  out.attempt_id = intent.attempt_id;
  out.key = intent.key;
  out.ok = result.has_value();
  if (!result) out.error = result.error();
  out.finished_at = now_ms();
  out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  auto recorded = recorder.outcome(intent, out);
  if (!result) {
    Error e = with_where(std::move(result).error());
    if (!recorded) e.facts["outcome_recorded"] = false;
    return std::unexpected(std::move(e));
  }
  if (!recorded) {
    Error e = with_where(std::move(recorded).error());
    e.code = Code::LedgerWriteFailed;
    return std::unexpected(e.context("the tool ran but its outcome could not be recorded; its intent stays an orphan"));
  }
  return ToolCallResult{std::move(*result), intent.attempt_id, intent.workdir, cap->outcome};
}

}  // namespace airlock::exec
