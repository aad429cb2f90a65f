// The network door in the real namespaces tier: curl and python through it over HTTP and HTTPS,
// refusals the agent can read, a rebinding name, no resolver and no raw way out, relayed requests,
// and a receipt for every request. Servers are on loopback, so the rules say allow_private.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "base/fs.h"
#include "broker/loopback_http.h"
#include "broker/session.h"
#include "cli_support.h"
#include "linux/probe.h"

namespace airlock::broker {
namespace {

using testing::TempDir;

// A loopback server that counts who reached it.
struct Server {
  std::atomic<int> hits = 0;
  std::mutex mu;
  std::vector<std::string> heads;
  std::unique_ptr<LoopbackHttp> http;
  std::string name;
  Server(const std::string& address, int port, std::string tag) : name(std::move(tag)) {
    auto s = LoopbackHttp::start(address, port, [this](const HttpRequest& r) {
      ++hits;
      std::lock_guard lk(mu);
      heads.push_back(r.head);
      return HttpReply{200, {{"Content-Type", "text/plain"}}, "hello from " + name + " path " + r.path + "\n"};
    });
    if (s) http = std::move(*s);
  }
  int port() const { return http ? http->port() : 0; }
};

// A resolver seam: a table of answers; a name with two answers gives the second from the second
// lookup on (a rebinding DNS server).
struct FakeDns {
  std::mutex mu;
  std::map<std::string, std::vector<std::vector<std::string>>> table;
  std::map<std::string, int> lookups;
  egress::Resolver fn() {
    return [this](const std::string& host) -> Result<std::vector<egress::IpAddress>> {
      std::lock_guard lk(mu);
      auto it = table.find(host);
      if (it == table.end()) return fail(Code::EgressDenied, host + " does not resolve (test table)");
      int n = lookups[host]++;
      const auto& answer = it->second[std::min<size_t>(static_cast<size_t>(n), it->second.size() - 1)];
      std::vector<egress::IpAddress> out;
      for (const auto& a : answer) out.push_back(*egress::parse_literal(a));
      return out;
    };
  }
  int count(const std::string& host) {
    std::lock_guard lk(mu);
    return lookups[host];
  }
};

// The decision recorded for the request whose target (as asked) is `target`; "" if none or several.
std::string decision_of(const std::vector<Json>& receipts, const std::string& target) {
  std::string found;
  int n = 0;
  for (const auto& r : receipts)
    if (r.value("target", "") == target) {
      found = r.value("decision", "");
      ++n;
    }
  return n == 1 ? found : "";
}

struct Ran {
  int status = -1;
  std::string out, err;
};

class DoorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(make_dirs(ws / "src").has_value());
    allowed_ = std::make_unique<Server>("127.0.0.1", 0, "allowed");
    ASSERT_TRUE(allowed_->http) << "no loopback server";
    // The forbidden server on another loopback address, same port when it is free there.
    forbidden_ = std::make_unique<Server>("127.0.0.2", allowed_->port(), "forbidden");
    if (!forbidden_->http) forbidden_ = std::make_unique<Server>("127.0.0.2", 0, "forbidden");
    ASSERT_TRUE(forbidden_->http);
    dns_.table["allowed.test"] = {{"127.0.0.1"}};
    dns_.table["forbidden.test"] = {{"127.0.0.2"}};
    dns_.table["rebind.test"] = {{"127.0.0.1"}, {"127.0.0.2"}};
    dns_.table["both.test"] = {{"127.0.0.1", "127.0.0.2"}};
  }

  // Rules: allowed.test by name (allow_private: it is loopback), and 127.0.0.1/32 by range, which
  // admits any name that resolves there (rebind.test, until it does not).
  std::string rules(int port, const std::string& extra_port = "") const {
    std::string ports = fmt::format("[{}{}]", port, extra_port);
    return fmt::format(R"([{{"host": "allowed.test", "ports": {0}, "schemes": ["http", "https"], "allow_private": true}},
                          {{"cidr": "127.0.0.1/32", "ports": {0}, "schemes": ["http", "https"]}}])",
                       ports);
  }

  std::unique_ptr<Session> open(const std::string& rule_json) {
    std::string text = fmt::format(R"({{"schema_version": "airlock.task_policy.v1", "executor": "namespaces",
      "workspace": "{}", "readable": ["."], "write_back_paths": ["src"],
      "code_network": {{"mode": "allowlist", "rules": {}}},
      "limits": {{"command_timeout_seconds": 60, "memory_mb": 1024, "max_processes": 64}}}})",
                                   ws.path(), rule_json);
    auto pol = policy::parse_layer_text(text, policy::builtin_default(), "door test policy");
    EXPECT_TRUE(pol.has_value()) << (pol ? "" : pol.error().message);
    if (!pol) return nullptr;
    auto facts = linux::probe_host(plan::fact_needs(*pol, exec::built_tiers()));
    auto tier = plan::assess(policy::ExecutorKind::Namespaces, facts, plan::Profile::Production, exec::built_tiers());
    if (!tier.available) {
      unavailable_ = tier.reason;
      return nullptr;
    }
    SessionOptions so{state.path(), plan::Profile::Production, std::nullopt};
    so.resolver = dns_.fn();
    auto s = Session::open(*pol, facts, so);
    EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().message);
    return s ? std::move(*s) : nullptr;
  }

  // Runs `script` with sh inside the session; captures its output.
  Ran sh(Session& s, const std::string& script) {
    std::string out_path = root / "out.txt", err_path = root / "err.txt";
    UniqueFd out(::open(out_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    UniqueFd err(::open(err_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    exec::Command c;
    c.argv = {"/bin/sh", "-c", script};
    c.stdout_fd = out.get();
    c.stderr_fd = err.get();
    Ran r;
    auto o = s.run_command(c);
    EXPECT_TRUE(o.has_value()) << (o ? "" : o.error().message);
    if (o) r.status = o->status.shell_status();
    r.out = testing::read_text(out_path);
    r.err = testing::read_text(err_path);
    return r;
  }

  std::vector<Json> door_receipts(Session& s) {
    std::vector<Json> out;
    auto all = s.receipts();
    EXPECT_TRUE(all.has_value());
    if (all)
      for (auto& r : *all)
        if (r["kind"] == "door.request") out.push_back(r);
    return out;
  }

#define OPEN_OR_SKIP(var, rule_json)                                                              \
  auto var = open(rule_json);                                                                     \
  if (!var && !unavailable_.empty()) {                                                            \
    if (testing::require_all_tiers()) FAIL() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but: " << unavailable_; \
    GTEST_SKIP() << "the namespaces tier is unavailable here: " << unavailable_;                  \
  }                                                                                               \
  ASSERT_TRUE(var)

  TempDir root, state, ws;
  std::unique_ptr<Server> allowed_, forbidden_;
  FakeDns dns_;
  std::string unavailable_;
};

TEST_F(DoorTest, CurlOverHttpReachesAnAllowedHostThroughTheDoor) {
  OPEN_OR_SKIP(s, rules(allowed_->port()));
  EXPECT_EQ(s->enforced().network, exec::NetworkEnforced::Door);
  EXPECT_EQ(exec::to_json(s->enforced())["network"], "door");
  auto r = sh(*s, fmt::format("echo \"$http_proxy $HTTPS_PROXY\"; curl -sS http://allowed.test:{}/hello", allowed_->port()));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("http://127.0.0.1:3128 http://127.0.0.1:3128"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hello from allowed path /hello"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(allowed_->hits, 1);
  // The server saw an origin-form request naming the admitted host, and no proxy fields.
  ASSERT_EQ(allowed_->heads.size(), 1u);
  EXPECT_EQ(allowed_->heads[0].rfind("GET /hello HTTP/1.1\r\n", 0), 0u) << allowed_->heads[0];
  EXPECT_NE(allowed_->heads[0].find(fmt::format("Host: allowed.test:{}", allowed_->port())), std::string::npos);
  EXPECT_EQ(allowed_->heads[0].find("roxy-"), std::string::npos) << allowed_->heads[0];
  auto rec = door_receipts(*s);
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0]["decision"], "allowed");
  EXPECT_EQ(rec[0]["host"], "allowed.test");
  EXPECT_EQ(rec[0]["connected"], fmt::format("127.0.0.1:{}", allowed_->port()));
  EXPECT_EQ(rec[0]["addresses"][0]["address"], "127.0.0.1");
  EXPECT_GT(rec[0]["bytes_up"].get<uint64_t>(), 0u);
  EXPECT_GT(rec[0]["bytes_down"].get<uint64_t>(), 0u);
  EXPECT_EQ(rec[0]["status"], 200);
}

TEST_F(DoorTest, PythonUrllibOverHttpReachesAnAllowedHost) {
  OPEN_OR_SKIP(s, rules(allowed_->port()));
  auto r = sh(*s, fmt::format("python3 -c 'import urllib.request; "
                              "print(urllib.request.urlopen(\"http://allowed.test:{}/py\", timeout=20).read().decode())'",
                              allowed_->port()));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("hello from allowed path /py"), std::string::npos) << r.out << r.err;
}

TEST_F(DoorTest, AHostNotOnTheListIsRefusedWithAReadableReason) {
  OPEN_OR_SKIP(s, rules(allowed_->port()));
  auto r = sh(*s, fmt::format("curl -sS -w '\\nstatus=%{{http_code}}\\n' http://forbidden.test:{}/x; "
                              "curl -sS -w '\\nstatus=%{{http_code}}\\n' https://forbidden.test:{}/x",
                              forbidden_->port(), forbidden_->port()));
  EXPECT_NE(r.out.find("status=403"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("airlock: refused: AIRLOCK_EGRESS_DENIED: http://forbidden.test"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("is not on the allow-list"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("allowed: host allowed.test ports"), std::string::npos) << r.out;
  // The CONNECT refusal: curl reports the proxy's 403 and fails.
  EXPECT_NE(r.err.find("403"), std::string::npos) << r.err;
  EXPECT_EQ(forbidden_->hits, 0);
  auto rec = door_receipts(*s);
  ASSERT_EQ(rec.size(), 2u);
  for (const auto& x : rec) {
    EXPECT_EQ(x["decision"], "refused");
    EXPECT_EQ(x["error"]["code"], "AIRLOCK_EGRESS_DENIED");
    EXPECT_FALSE(x.contains("connected"));
  }
  EXPECT_EQ(decision_of(rec, fmt::format("forbidden.test:{}", forbidden_->port())), "refused");  // the CONNECT
}

// An allowed destination that is down failed; it was not refused: 502 AIRLOCK_EGRESS_FAILED with
// the address and errno, and the receipt says "failed", never a policy denial.
TEST_F(DoorTest, AnAllowedHostThatIsDownFailsAndIsNotRecordedAsADenial) {
  int down_port = allowed_->port();
  allowed_.reset();  // nothing listens there now
  OPEN_OR_SKIP(s, rules(down_port));
  auto r = sh(*s, fmt::format("curl -sS -w '\\nstatus=%{{http_code}}\\n' http://allowed.test:{}/x", down_port));
  EXPECT_NE(r.out.find("status=502"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("airlock: failed: AIRLOCK_EGRESS_FAILED: connecting to 127.0.0.1 port"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("allowed: host"), std::string::npos) << r.out;  // no allow-list lecture: it was allowed
  auto rec = door_receipts(*s);
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0]["decision"], "failed");
  EXPECT_EQ(rec[0]["status"], 502);
  EXPECT_EQ(rec[0]["error"]["code"], "AIRLOCK_EGRESS_FAILED");
  EXPECT_EQ(rec[0]["error"]["facts"]["errno_name"], "ECONNREFUSED") << rec[0].dump();
  EXPECT_EQ(rec[0]["error"]["facts"]["address"], "127.0.0.1");
  EXPECT_EQ(rec[0]["error"]["facts"]["port"], down_port);
}

TEST_F(DoorTest, ANameThatRebindsToAForbiddenAddressIsRefused) {
  OPEN_OR_SKIP(s, rules(allowed_->port()));
  int port = allowed_->port();
  ASSERT_EQ(forbidden_->port(), port) << "127.0.0.2:" << port << " was taken";
  auto r = sh(*s, fmt::format("curl -sS http://rebind.test:{0}/one; echo; curl -sS http://rebind.test:{0}/two; echo; "
                              "curl -sS http://both.test:{0}/three",
                              port));
  EXPECT_NE(r.out.find("hello from allowed path /one"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("127.0.0.2 is outside 127.0.0.1/32"), std::string::npos) << r.out;
  EXPECT_EQ(forbidden_->hits, 0);
  EXPECT_EQ(allowed_->hits, 1);
  // One lookup per request, and the connection went to the address that lookup gave.
  EXPECT_EQ(dns_.count("rebind.test"), 2);
  auto rec = door_receipts(*s);
  ASSERT_EQ(rec.size(), 3u);
  EXPECT_EQ(decision_of(rec, fmt::format("http://rebind.test:{}/one", port)), "allowed");
  EXPECT_EQ(decision_of(rec, fmt::format("http://rebind.test:{}/two", port)), "refused");
  // One answer in range and one outside: refused.
  EXPECT_EQ(decision_of(rec, fmt::format("http://both.test:{}/three", port)), "refused");
  for (const auto& x : rec) {
    if (x["target"] == fmt::format("http://rebind.test:{}/two", port)) {
      EXPECT_EQ(x["addresses"][0]["address"], "127.0.0.2");
    }
  }
}

TEST_F(DoorTest, NoResolverInsideAndNoWayAroundTheDoor) {
  int port = allowed_->port();
  std::string probe = fmt::format(R"PY(
import socket, errno
def attempt(name, fn):
    try:
        fn(); print(name, "REACHED")
    except OSError as e:
        print(name, "failed", e.errno)
attempt("tcp_v4", lambda: socket.create_connection(("127.0.0.1", {0}), 3))
attempt("tcp_v4_other", lambda: socket.create_connection(("127.0.0.2", {0}), 3))
attempt("tcp_v6", lambda: socket.create_connection(("::1", {0}), 3))
attempt("tcp_public", lambda: socket.create_connection(("1.1.1.1", 443), 3))
def udp():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.connect(("1.1.1.1", 53)); u.send(b"x")
attempt("udp", udp)
attempt("icmp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP).sendto(b"\x08\0\0\0\0\0\0\0", ("1.1.1.1", 0)))
attempt("raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP))
try:
    print("resolve", socket.getaddrinfo("allowed.test", 80))
except OSError as e:
    print("resolve failed", e)
)PY",
                                  port);
  ASSERT_TRUE(write_file_atomic(ws / "src/probe.py", probe).has_value());
  OPEN_OR_SKIP(s2, rules(port));
  auto r = sh(*s2, "ls /etc/resolv.conf 2>&1; getent hosts allowed.test; echo getent=$?; "
                   "dig +time=1 +tries=1 allowed.test; echo dig=$?; dig +time=1 +tries=1 @1.1.1.1 example.com; "
                   "echo dig_public=$?; python3 src/probe.py");
  EXPECT_NE(r.out.find("getent=2"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(r.out.find("dig=0"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("dig_public=0"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("127.0.0.1\t"), std::string::npos) << r.out;
  for (const char* name : {"tcp_v4 failed", "tcp_v4_other failed", "tcp_v6 failed", "tcp_public failed", "udp failed",
                           "icmp failed", "raw failed", "resolve failed"})
    EXPECT_NE(r.out.find(name), std::string::npos) << name << " in:\n" << r.out << r.err;
  EXPECT_EQ(r.out.find("REACHED"), std::string::npos) << r.out;
  EXPECT_EQ(allowed_->hits, 0);
  EXPECT_EQ(forbidden_->hits, 0);
  EXPECT_TRUE(door_receipts(*s2).empty());
}

TEST_F(DoorTest, RequestsRelayedThroughAnAllowedConnectionNeverReachAForbiddenHost) {
  int port = allowed_->port(), fport = forbidden_->port();
  // (1) a CONNECT tunnel to the allowed host that asks, inside, for the forbidden one; (2) two
  // requests on one kept-alive connection to the door, the second for the forbidden host;
  // (3) an origin-form request with a Host header naming the forbidden host.
  std::string script = fmt::format(R"PY(
import socket
def talk(data):
    c = socket.create_connection(("127.0.0.1", 3128), 10)
    c.sendall(data)
    got = b""
    while True:
        b = c.recv(65536)
        if not b: break
        got += b
    c.close()
    return got.decode(errors="replace")
print("ONE", talk(b"CONNECT allowed.test:{0} HTTP/1.1\r\nHost: allowed.test:{0}\r\n\r\n"
                  b"GET http://forbidden.test:{1}/relayed HTTP/1.1\r\nHost: forbidden.test:{1}\r\n\r\n"))
print("TWO", talk(b"GET http://allowed.test:{0}/first HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
                  b"GET http://forbidden.test:{1}/second HTTP/1.1\r\nHost: forbidden.test\r\n\r\n"))
print("THREE", talk(b"GET /third HTTP/1.1\r\nHost: forbidden.test:{1}\r\n\r\n"))
)PY",
                                   port, fport);
  ASSERT_TRUE(write_file_atomic(ws / "src/relay.py", script).has_value());
  OPEN_OR_SKIP(s2, rules(port));
  auto r = sh(*s2, "python3 src/relay.py");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(forbidden_->hits, 0) << r.out;
  // The tunnel's bytes went to the allowed server, whatever they said.
  EXPECT_NE(r.out.find("hello from allowed path http://forbidden.test"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hello from allowed path /first"), std::string::npos) << r.out;
  size_t two = r.out.find("TWO");
  ASSERT_NE(two, std::string::npos);
  EXPECT_NE(r.out.find("403 Forbidden", two), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("forbidden.test", two), std::string::npos) << r.out;
  size_t three = r.out.find("THREE");
  ASSERT_NE(three, std::string::npos);
  EXPECT_NE(r.out.find("400 Bad Request", three), std::string::npos) << r.out;
  auto rec = door_receipts(*s2);
  ASSERT_EQ(rec.size(), 4u);
  EXPECT_EQ(decision_of(rec, fmt::format("allowed.test:{}", port)), "allowed");  // the CONNECT
  EXPECT_EQ(decision_of(rec, fmt::format("http://allowed.test:{}/first", port)), "allowed");
  EXPECT_EQ(decision_of(rec, fmt::format("http://forbidden.test:{}/second", fport)), "refused");
  EXPECT_EQ(decision_of(rec, "/third"), "refused");
}

// HTTPS through CONNECT with a CA the test makes: curl and python verify the server's name.
TEST_F(DoorTest, CurlAndPythonOverHttpsThroughConnect) {
  auto openssl = [&](const std::string& args) {
    std::string cmd = "cd " + root.path() + " && openssl " + args + " >/dev/null 2>&1";
    return std::system(cmd.c_str());
  };
  ASSERT_EQ(openssl("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem "
                    "-days 2 -subj /CN=airlock-test-ca"),
            0);
  ASSERT_EQ(openssl("req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout srv.key -out srv.csr "
                    "-subj /CN=allowed.test -addext subjectAltName=DNS:allowed.test"),
            0);
  ASSERT_EQ(openssl("x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 "
                    "-copy_extensions copy"),
            0);
  ASSERT_TRUE(write_file_atomic(ws / "src/ca.pem", testing::read_text(root / "ca.pem")).has_value());
  // A free loopback port for openssl s_server, which answers GET / with a page that names itself.
  UniqueFd probe(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(probe.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin), 0);
  socklen_t len = sizeof sin;
  ::getsockname(probe.get(), reinterpret_cast<sockaddr*>(&sin), &len);
  int port = ntohs(sin.sin_port);
  probe.reset();
  std::string accept = fmt::format("127.0.0.1:{}", port);  // made before fork: the child only execs
  pid_t server = ::fork();
  if (server == 0) {
    ::chdir(root.path().c_str());
    int devnull = ::open("/dev/null", O_RDWR);
    ::dup2(devnull, 0);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    ::execlp("openssl", "openssl", "s_server", "-quiet", "-accept", accept.c_str(), "-cert",
             "srv.pem", "-key", "srv.key", "-www", nullptr);
    ::_exit(127);
  }
  ASSERT_GT(server, 0);
  struct Reap {
    pid_t pid;
    ~Reap() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reap{server};
  for (int i = 0; i < 100; ++i) {  // until it listens
    UniqueFd c(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(c.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin) == 0) break;
    ::usleep(50000);
  }
  OPEN_OR_SKIP(s, rules(port));
  auto r = sh(*s, fmt::format("curl -sS --cacert src/ca.pem https://allowed.test:{0}/ | grep -c 'Ciphers supported in s_server binary'; "
                              "python3 -c 'import ssl, urllib.request; "
                              "c = ssl.create_default_context(cafile=\"src/ca.pem\"); "
                              "print(urllib.request.urlopen(\"https://allowed.test:{0}/\", context=c, timeout=20).status)'",
                              port));
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "1\n200\n") << r.err;
  auto rec = door_receipts(*s);
  ASSERT_EQ(rec.size(), 2u);
  for (const auto& x : rec) {
    EXPECT_EQ(x["method"], "CONNECT");
    EXPECT_EQ(x["decision"], "allowed");
    EXPECT_EQ(x["connected"], fmt::format("127.0.0.1:{}", port));
    EXPECT_GT(x["bytes_down"].get<uint64_t>(), 500u);  // a TLS handshake at least
  }
}

// The command line end to end: `airlock run` with the system resolver, an address rule, curl inside.
TEST(DoorCli, AirlockRunGoesOutOnlyThroughTheDoorAndRecordsEveryRequest) {
  testing::CliFixture fx(testing::Identity::Self);
  Server allowed("127.0.0.1", 0, "allowed");
  ASSERT_TRUE(allowed.http);
  std::string policy = fx.write_policy(fmt::format(
      R"({{"schema_version": "airlock.task_policy.v1", "executor": "namespaces",
          "code_network": {{"mode": "allowlist", "rules": [{{"cidr": "127.0.0.1/32", "ports": [{}], "schemes": ["http"]}}]}}}})",
      allowed.port()));
  auto r = fx.run({"run", "--policy", policy, "--", "/bin/sh", "-c",
                   fmt::format("curl -sS http://127.0.0.1:{0}/cli && curl -sS http://127.0.0.1:{1}/wrong-port", allowed.port(),
                               allowed.port() + 1)});
  if (r.status == 125 && r.err.find("AIRLOCK_EXECUTOR_UNAVAILABLE") != std::string::npos) {
    if (testing::require_all_tiers()) FAIL() << "AIRLOCK_REQUIRE_ALL_TIERS=1 but: " << r.err;
    GTEST_SKIP() << "the namespaces tier is unavailable here: " << r.err;
  }
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("hello from allowed path /cli"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("does not admit port"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("network door"), std::string::npos) << r.err;
  EXPECT_EQ(allowed.hits, 1);
  auto files = fx.receipts();
  ASSERT_EQ(files.size(), 1u);
  std::string text = testing::read_text(files[0]);
  size_t allowed_at = text.find(R"("decision":"allowed","door":"http")");
  EXPECT_NE(allowed_at, std::string::npos) << text;
  EXPECT_NE(text.find(R"("decision":"refused","door":"http")"), std::string::npos) << text;
}

// A tier that cannot cut the network is refused by name for an allowlist policy, never run open.
TEST(DoorCli, LandlockAloneIsRefusedForAnAllowlistPolicy) {
  testing::CliFixture fx(testing::Identity::Self);
  std::string policy = fx.write_policy(
      R"({"schema_version": "airlock.task_policy.v1", "executor": "landlock",
          "code_network": {"mode": "allowlist", "rules": [{"host": "example.com", "ports": [443]}]}})");
  auto r = fx.run({"run", "--policy", policy, "--", "/bin/true"});
  EXPECT_EQ(r.status, 125);
  EXPECT_NE(r.err.find("airlock: refused: AIRLOCK_ISOLATION_POLICY_INVALID"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("network cut and a door"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace airlock::broker
