// The broker attack suite: each attack through a Session, then the same call through plain APIs.
#include "broker/attack_suite.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "base/child_process.h"
#include "base/fs.h"
#include "base/hash.h"
#include "broker/loopback_http.h"
#include "broker/session.h"
#include "egress/curl_api.h"

namespace airlock::broker {

Json AttackResult::to_json() const {
  return {{"name", name},       {"expected", expected}, {"broker", broker},
          {"contained", contained}, {"baseline_breached", baseline_breached},
          {"detail", detail},   {"baseline_detail", baseline_detail}};
}

namespace {

namespace fs = std::filesystem;

// Three loopback servers: the allowed one on 127.0.0.1, the one an attack wants to reach on
// 127.0.0.2 (same port), and one on another port that only the wildcard rule names. Each
// counts the requests it was sent.
class Servers {
 public:
  Result<void> start() {
    auto a = TRY(LoopbackHttp::start("127.0.0.1", 0, [this](const HttpRequest&) {
      ++any_hits;
      return HttpReply{200, {}, "good"};
    }));
    any_ = std::move(a);
    any_port = any_->port();
    auto g = TRY(LoopbackHttp::start("127.0.0.1", 0, [this](const HttpRequest& req) {
      const std::string& path = req.path;
      ++good_hits;
      if (path == "/redirect") return HttpReply{302, {{"Location", fmt::format("http://evil.test:{}/", port)}}, ""};
      if (path == "/big") return HttpReply{200, {}, std::string(kBigBytes, 'x')};
      return HttpReply{200, {}, "good"};
    }));
    good_ = std::move(g);
    port = good_->port();
    auto e = TRY(LoopbackHttp::start("127.0.0.2", port, [this](const HttpRequest&) {
      ++evil_hits;
      return HttpReply{200, {}, "evil"};
    }));
    evil_ = std::move(e);
    return {};
  }
  static constexpr size_t kBigBytes = 1 << 20;
  int port = 0;      // good (127.0.0.1) and evil (127.0.0.2)
  int any_port = 0;  // the port the wildcard rule admits: its addresses must be global
  std::atomic<int> good_hits = 0, evil_hits = 0, any_hits = 0;

 private:
  std::unique_ptr<LoopbackHttp> good_, evil_, any_;
};

// The baseline's network API: libcurl as a program would use it, told where names resolve.
struct Plain {
  bool ok = false;
  long status = 0;
  std::string body;
  std::string error;
};

size_t plain_body(char* p, size_t size, size_t n, void* ud) {
  static_cast<std::string*>(ud)->append(p, size * n);
  return size * n;
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

// The baseline's process API: run argv, return its stdout.
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

template <class T>
std::string answer(const Result<T>& r) {
  return r ? std::string("allowed") : std::string(to_name(r.error().code));
}

template <class T>
std::string why(const Result<T>& r) {
  return r ? std::string() : r.error().message;
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
    {{ "name": "sleeper", "argv": ["/usr/bin/sleep", "30"], "allow_args": false, "timeout_seconds": 60 }}
  ],
  "limits": {{ "max_actions_per_minute": {}, "max_response_bytes": 65536 }}
}})",
                     workspace, port, port, any_port, per_minute);
}

}  // namespace

Result<std::vector<AttackResult>> run_attack_suite(const AttackSuiteOptions& opts) {
  std::string tmpl = opts.state_dir + "/broker-suite-XXXXXX";
  if (!::mkdtemp(tmpl.data())) return fail_errno(Code::ConfigError, "mkdtemp under " + opts.state_dir, errno);
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
  const int port = servers.port;
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
    auto pol = TRY(policy::parse_layer_text(policy_text(ws, port, servers.any_port, per_minute), policy::builtin_default(),
                                            "the broker suite's policy"));
    SessionOptions so{state, plan::Profile::Production, std::nullopt};
    so.resolver = resolver;
    return Session::open(pol, opts.facts, so);
  };
  auto s = TRY(open_session(60));
  const std::string view = s->dirs().view;
  std::vector<AttackResult> out;
  auto add = [&](std::string name, std::string expected, std::string broker, bool contained, std::string detail,
                 bool breached, std::string baseline_detail) {
    out.push_back({std::move(name), std::move(expected), std::move(broker), contained, breached, std::move(detail),
                   std::move(baseline_detail)});
  };
  auto leaks = [&](const std::string& s) { return s.find(token) != std::string::npos; };
  const std::string path_denied(to_name(Code::PathDenied));

  // Files.
  {
    auto r = s->read_file(secret);
    std::string b = plain_read(secret);
    add("absolute_path", path_denied, answer(r), answer(r) == path_denied, why(r), leaks(b), "open(2) read the secret");
  }
  {
    std::string rel = fs::relative(secret, view).string();
    auto r = s->read_file(rel);
    std::string b = plain_read(view + "/" + rel);
    add("dot_dot", path_denied, answer(r), answer(r) == path_denied, rel + ": " + why(r), leaks(b),
        "open(2) followed .. out of the view");
  }
  {
    TRY(make_dirs(view + "/x/y"));
    ::symlink(outside.c_str(), (view + "/x/y/z").c_str());
    auto r = s->read_file("x/y/z/secret.txt");
    std::string b = plain_read(view + "/x/y/z/secret.txt");
    add("symlink_at_depth_three", path_denied, answer(r), answer(r) == path_denied, why(r), leaks(b),
        "open(2) followed x/y/z to the secret");
  }
  {
    const std::string swap = view + "/swap.txt";
    auto make_plain = [&] {
      ::unlink(swap.c_str());
      (void)write_file_atomic(swap, "harmless\n");
    };
    auto swap_in = [&] {
      ::unlink(swap.c_str());
      ::symlink(secret.c_str(), swap.c_str());
    };
    make_plain();
    s->path_guard().before_open = [&](const std::string& rel) {
      if (rel == "swap.txt") swap_in();
    };
    auto r = s->read_file("swap.txt");
    s->path_guard().before_open = nullptr;
    // The baseline checks (lstat: a regular file), is raced in the same window, then opens.
    make_plain();
    struct stat st{};
    bool checked = ::lstat(swap.c_str(), &st) == 0 && S_ISREG(st.st_mode);
    swap_in();
    std::string b = checked ? plain_read(swap) : "";
    add("symlink_swapped_during_action", path_denied, answer(r), answer(r) == path_denied && !leaks(r ? r->data : ""),
        why(r), leaks(b), "lstat said regular file; open(2) then followed the swapped-in symlink");
  }
  {
    ::link(secret.c_str(), (view + "/hard.txt").c_str());
    auto r = s->read_file("hard.txt");
    std::string b = plain_read(view + "/hard.txt");
    add("hard_link_outside", path_denied, answer(r), answer(r) == path_denied, why(r), leaks(b),
        "open(2) read the secret through the hard link");
  }
  {
    auto r = s->read_file(".env");
    // The baseline is a process in the workspace itself: the view never holds a denied name.
    std::string b = plain_read(ws + "/.env");
    add("denied_name", path_denied, answer(r), answer(r) == path_denied, why(r), leaks(b),
        "open(2) read .env in the workspace");
  }
  {
    auto r = s->read_file("/proc/self/root" + secret);
    std::string b = plain_read("/proc/self/root" + secret);
    add("proc_self_root", path_denied, answer(r), answer(r) == path_denied, why(r), leaks(b),
        "open(2) read the secret through /proc/self/root");
  }
  {
    ::symlink(target.c_str(), (view + "/out/link.txt").c_str());
    auto r = s->write_file("out/link.txt", "overwritten\n");
    bool intact = plain_read(target) == "original\n";
    { std::ofstream(view + "/out/link.txt") << "overwritten\n"; }
    bool breached = plain_read(target) == "overwritten\n";
    add("write_through_symlink", path_denied, answer(r), answer(r) == path_denied && intact, why(r), breached,
        "open(2) for writing followed the symlink and overwrote a file outside");
  }

  // Network.
  const std::string egress_denied(to_name(Code::EgressDenied));
  const int any = servers.any_port;
  {
    int before = servers.any_hits;
    auto r = s->http_fetch({"GET", fmt::format("http://loopback.test:{}/", any), {}, {}});
    bool untouched = servers.any_hits == before;
    auto b = plain_fetch(fmt::format("http://loopback.test:{}/", any), {fmt::format("loopback.test:{}:127.0.0.1", any)},
                         false);
    add("name_resolving_to_loopback", egress_denied, answer(r), answer(r) == egress_denied && untouched, why(r),
        b.ok && b.body == "good", "libcurl connected to the loopback server");
  }
  {
    rebind_calls = 0;
    int evil_before = servers.evil_hits;
    auto r = s->http_fetch({"GET", fmt::format("http://rebind.test:{}/", port), {}, {}});
    bool pinned = r && r->body == "good" && servers.evil_hits == evil_before;
    // The baseline checks the first answer (127.0.0.1, inside the CIDR rule), then connects by
    // name, and the name now answers 127.0.0.2.
    rebind_calls = 0;
    auto first = resolver("rebind.test");
    auto second = resolver("rebind.test");
    int evil_mid = servers.evil_hits;
    auto b = plain_fetch(fmt::format("http://rebind.test:{}/", port),
                         {fmt::format("rebind.test:{}:{}", port, (*second)[0].to_string())}, false);
    (void)first;
    add("dns_answer_changes_between_lookups", "pinned", answer(r), pinned,
        r ? fmt::format("fetched from {}", r->pinned_address) : why(r), b.ok && servers.evil_hits > evil_mid,
        "checked 127.0.0.1, then connected to 127.0.0.2");
  }
  {
    int evil_before = servers.evil_hits;
    auto r = s->http_fetch({"GET", fmt::format("http://allowed.test:{}/redirect", port), {}, {}});
    bool returned = r && r->status / 100 == 3 && !r->redirect_to.empty() && servers.evil_hits == evil_before;
    auto b = plain_fetch(fmt::format("http://allowed.test:{}/redirect", port),
                         {fmt::format("allowed.test:{}:127.0.0.1", port), fmt::format("evil.test:{}:127.0.0.2", port)},
                         true);
    add("redirect_to_a_host_not_allowed", "not followed", answer(r), returned,
        r ? fmt::format("{} returned with Location {}", r->status, r->redirect_to) : why(r),
        b.ok && b.body == "evil", "libcurl followed the redirect to evil.test");
  }
  for (const auto& [name, url] : std::vector<std::pair<std::string, std::string>>{
           {"decimal_ipv4_literal_of_loopback", fmt::format("http://2130706433:{}/", any)},
           {"ipv4_mapped_ipv6_literal_of_loopback", fmt::format("http://[::ffff:127.0.0.1]:{}/", any)}}) {
    auto r = s->http_fetch({"GET", url, {}, {}});
    auto b = plain_fetch(url, {}, false);
    add(name, egress_denied, answer(r), answer(r) == egress_denied, why(r), b.ok && b.body == "good",
        "libcurl reached the loopback server");
  }
  {
    const std::string limit(to_name(Code::LimitExceeded));
    auto r = s->http_fetch({"GET", fmt::format("http://allowed.test:{}/big", port), {}, {}});
    auto b = plain_fetch(fmt::format("http://allowed.test:{}/big", port), {fmt::format("allowed.test:{}:127.0.0.1", port)},
                         false);
    add("oversized_response", limit, answer(r), answer(r) == limit, why(r), b.body.size() > 65536,
        fmt::format("libcurl took all {} bytes", b.body.size()));
  }

  // Tools.
  {
    const std::string code(to_name(Code::ToolNotDeclared));
    auto r = s->run_tool("sh", {"-c", "cat " + secret});
    std::string b = plain_run({"/bin/sh", "-c", "cat " + secret});
    add("undeclared_tool", code, answer(r), answer(r) == code, why(r), leaks(b), "execve ran sh, which read the secret");
  }
  {
    const std::string code(to_name(Code::ToolArgsDenied));
    auto r = s->run_tool("greet", {"--injected"});
    std::string b = plain_run({"/bin/echo", "hello", "--injected"});
    add("arguments_to_a_tool_that_allows_none", code, answer(r), answer(r) == code, why(r),
        b.find("--injected") != std::string::npos, "execve passed the extra argument");
  }
  (void)s->close(false);

  // Limits and the kill switch, each in a session of its own.
  {
    const std::string code(to_name(Code::RateLimited));
    auto flood = TRY(open_session(10));
    std::string last = "allowed";
    int admitted = 0;
    for (int i = 0; i < 11; ++i) {
      auto r = flood->read_file("ok.txt");
      last = answer(r);
      if (r) ++admitted;
    }
    int plain_ok = 0;
    for (int i = 0; i < 11; ++i) plain_ok += plain_read(ws + "/ok.txt") == "ordinary\n";
    add("flood_past_the_rate_limit", code, last, last == code && admitted == 10,
        fmt::format("{} of 11 admitted at 10 per minute", admitted), plain_ok == 11, "open(2) read 11 times");
    (void)flood->close(false);
  }
  {
    const std::string code(to_name(Code::SessionKilled));
    auto k = TRY(open_session(60));
    (void)k->kill();
    auto r = k->read_file("ok.txt");
    add("action_after_kill", code, answer(r), answer(r) == code, why(r), plain_read(ws + "/ok.txt") == "ordinary\n",
        "open(2) has no kill switch");
  }
  {
    const std::string code(to_name(Code::SessionKilled));
    auto k = TRY(open_session(60));
    Result<ToolResult> r = fail(Code::ConfigError, "did not run");
    auto started = std::chrono::steady_clock::now();
    std::thread t([&] { r = k->run_tool("sleeper", {}); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    (void)k->kill();
    t.join();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    // The baseline: a process started with no broker is still there when the "kill" comes.
    pid_t pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    bool alive = pid > 0 && ::kill(pid, 0) == 0;
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    add("running_tool_after_kill", code, answer(r), answer(r) == code && secs < 20,
        fmt::format("the tool ended {:.1f} s after it started: {}", secs, why(r)), alive,
        "sleep 30 ran on after the kill request");
  }
  return out;
}

}  // namespace airlock::broker
