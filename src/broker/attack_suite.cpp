// The broker attack suite: the world every attack shares (files, servers, names, a session), the
// table of attacks (broker/attacks.inc, one file each under broker/attacks/) and the plain-API
// baselines they compare with.
#include "broker/approvals.h"
#include "broker/attack_suite.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/hash.h"
#include "broker/attack.h"
#include "egress/curl_api.h"

namespace airlock::broker {

Json AttackResult::to_json() const {
  return {{"name", name},
          {"expected", expected},
          {"broker", broker},
          {"contained", contained},
          {"baseline_breached", baseline_breached},
          {"detail", detail},
          {"baseline_detail", baseline_detail}};
}

namespace attacks {
#define AIRLOCK_ATTACK(name)                  \
  namespace name {                            \
  Result<AttackResult> run(AttackContext& c); \
  }
#include "broker/attacks.inc"
}  // namespace attacks

namespace {

struct Row {
  std::string_view name;
  Result<AttackResult> (*run)(AttackContext&);
};

constexpr Row kAttacks[] = {
#define AIRLOCK_ATTACK(name) {#name, &attacks::name::run},
#include "broker/attacks.inc"
};

size_t plain_body(char* p, size_t size, size_t n, void* ud) {
  static_cast<std::string*>(ud)->append(p, size * n);
  return size * n;
}

std::string policy_text(const std::string& workspace, int port, int any_port, int per_minute) {
  return fmt::format(R"({{
  "schema_version": "airlock.task_policy.v1",
  "task_id": "broker-suite",
  "workspace": "{}",
  "readable": ["."],
  "write_back_paths": ["out"],
  "egress": [
    {{ "host": "allowed.test", "ports": [{}], "schemes": ["http"], "allow_private": true }},
    {{ "cidr": "127.0.0.1/32", "ports": [{}], "schemes": ["http"] }},
    {{ "host": "*", "ports": [{}], "schemes": ["http"] }}
  ],
  "tools": [
    {{ "name": "greet", "argv": ["/usr/bin/echo", "hello"], "allow_args": false, "timeout_seconds": 30 }},
    {{ "name": "sleeper", "argv": ["/usr/bin/sleep", "30"], "allow_args": false, "timeout_seconds": 60 }},
    {{ "name": "pay", "protocol": "json", "approval": "required", "timeout_seconds": 30,
       "argv": ["/bin/sh", "-c", "read line; echo '{{\"paid\": true}}'"] }}
  ],
  "limits": {{ "max_actions_per_minute": {}, "max_response_bytes": 65536 }}
}})",
                     workspace, port, port, any_port, per_minute);
}

}  // namespace

Result<void> Servers::start() {
  any_ = TRY(LoopbackHttp::start("127.0.0.1", 0, [this](const HttpRequest&) {
    ++any_hits;
    return HttpReply{200, {}, "good"};
  }));
  any_port = any_->port();
  good_ = TRY(LoopbackHttp::start("127.0.0.1", 0, [this](const HttpRequest& req) {
    const std::string& path = req.path;
    ++good_hits;
    if (path == "/redirect")
      return HttpReply{302, {{"Location", fmt::format("http://evil.test:{}/", port)}}, ""};
    if (path == "/big") return HttpReply{200, {}, std::string(kBigBytes, 'x')};
    return HttpReply{200, {}, "good"};
  }));
  port = good_->port();
  evil_ = TRY(LoopbackHttp::start("127.0.0.2", port, [this](const HttpRequest&) {
    ++evil_hits;
    return HttpReply{200, {}, "evil"};
  }));
  return {};
}

Plain plain_fetch(const std::string& url, const std::vector<std::string>& resolve, bool follow) {
  Plain out;
  auto api = egress::curl_api();
  if (!api) {
    out.error = api.error().message;
    return out;
  }
  const egress::CurlApi& c = **api;
  CURL* h = c.easy_init();
  curl_slist* res = nullptr;
  for (const auto& r : resolve) res = c.slist_append(res, r.c_str());
  c.easy_setopt(h, CURLOPT_URL, url.c_str());
  c.easy_setopt(h, CURLOPT_RESOLVE, res);
  c.easy_setopt(h, CURLOPT_FOLLOWLOCATION, follow ? 1L : 0L);
  c.easy_setopt(h, CURLOPT_PROXY, "");
  c.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  c.easy_setopt(h, CURLOPT_TIMEOUT_MS, 10000L);
  c.easy_setopt(h, CURLOPT_WRITEFUNCTION, plain_body);
  c.easy_setopt(h, CURLOPT_WRITEDATA, &out.body);
  CURLcode rc = c.easy_perform(h);
  out.ok = rc == CURLE_OK;
  if (!out.ok) out.error = c.easy_strerror(rc);
  c.easy_getinfo(h, CURLINFO_RESPONSE_CODE, &out.status);
  c.slist_free_all(res);
  c.easy_cleanup(h);
  return out;
}

std::string plain_run(const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) < 0) return "";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return out;
}

std::string plain_read(const std::string& path) { return read_file(path).value_or(""); }

Result<void> AttackContext::ask_and_approve(Session& s, const Json& args) {
  auto asked = pay(s, args);
  if (asked || asked.error().code != Code::ApprovalRequired)
    return fail(Code::InternalError, "a call to the pay tool was not held for approval");
  TRY(ApprovalStore(state).decide(asked.error().facts.value("approval_id", ""), true, 1, kApprovalTtlMs,
                                  "broker suite"));
  return {};
}

AttackResult AttackContext::must_hold(const Result<ToolResult>& r, std::string baseline_detail) {
  const std::string code(to_name(Code::ApprovalRequired));
  std::string b = plain_run({"/bin/sh", "-c", "read line; echo '{\"paid\": true}'"});
  return AttackResult{.expected = code,
                      .broker = answer(r),
                      .contained = answer(r) == code,
                      .baseline_breached = b.find("paid") != std::string::npos,
                      .detail = why(r),
                      .baseline_detail = std::move(baseline_detail)};
}

Result<std::vector<AttackResult>> run_attack_suite(const AttackSuiteOptions& opts) {
  std::string tmpl = opts.state_dir + "/broker-suite-XXXXXX";
  if (!::mkdtemp(tmpl.data())) return fail_errno(Code::IoError, "mkdtemp under " + opts.state_dir, errno);
  const std::string root = tmpl;
  struct Cleanup {
    std::string root;
    ~Cleanup() { (void)remove_tree(root); }
  } cleanup{root};

  // The files: a workspace with an ordinary file and a denied one, and outside it a secret.
  const std::string token = "airlock-canary-" + random_id();
  const std::string ws = root + "/workspace", outside = root + "/outside", state = root + "/state";
  TRY(make_dirs(ws + "/out"));
  TRY(make_dirs(outside));
  TRY(make_dirs(state));
  TRY(write_file_atomic(ws + "/ok.txt", "ordinary\n"));
  TRY(write_file_atomic(ws + "/.env", "API_KEY=" + token + "\n"));
  const std::string secret = outside + "/secret.txt", target = outside + "/target.txt";
  TRY(write_file_atomic(secret, token + "\n"));
  TRY(write_file_atomic(target, "original\n"));

  Servers servers;
  TRY(servers.start());
  std::atomic<int> rebind_calls = 0;
  // The suite's DNS: a table, and one name whose answer changes after the first lookup.
  egress::Resolver resolver = [&](const std::string& host) -> Result<std::vector<egress::IpAddress>> {
    std::string a;
    if (host == "allowed.test" || host == "loopback.test") a = "127.0.0.1";
    if (host == "evil.test") a = "127.0.0.2";
    if (host == "rebind.test") a = rebind_calls++ == 0 ? "127.0.0.1" : "127.0.0.2";
    if (a.empty()) return fail(Code::EgressDenied, host + " does not resolve");
    return std::vector<egress::IpAddress>{*egress::parse_literal(a)};
  };
  auto open_session = [&](int per_minute) -> Result<std::unique_ptr<Session>> {
    auto pol = TRY(policy::parse_layer_text(policy_text(ws, servers.port, servers.any_port, per_minute),
                                            policy::builtin_default(), "the broker suite's policy"));
    SessionOptions so{state, plan::Profile::Production, std::nullopt};
    so.resolver = resolver;
    return Session::open(pol, opts.facts, so);
  };
  auto shared = TRY(open_session(60));
  AttackContext c{ws,       shared->dirs().view, outside, secret,      target, token, servers,
                  resolver, rebind_calls,        *shared, open_session, state};

  std::vector<AttackResult> out;
  for (const Row& row : kAttacks) {
    AttackResult r = TRY(row.run(c));
    r.name = std::string(row.name);
    out.push_back(std::move(r));
  }
  (void)shared->close(false);
  return out;
}

}  // namespace airlock::broker
