// `airlock serve` under hostile and abandoned load: bounded heads and bodies, reaped sessions,
// refusals counted rather than each recorded, disk budgets, and a bounded soak.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "broker/session.h"
#include "serve_support.h"

namespace airlock::testing {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;
using server::HttpClient;
using server::HttpReply;

std::string policy_json(const CliFixture& f, const Json& limits = Json::object()) {
  Json l = {{"session_budget_seconds", 7200}, {"command_timeout_seconds", 60}};
  l.update(limits);
  Json p = {{"schema_version", "airlock.task_policy.v1"},
            {"workspace", f.workspace()},
            {"readable", {"src", "reports"}},
            {"write_back_paths", {"reports"}},
            {"tools", {{{"name", "count"}, {"argv", {"/usr/bin/wc", "-c", "src/app.py"}}}}},
            {"limits", l}};
  return p.dump();
}

long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// One raw connection: sends `parts` (stopping when the server hangs up) and returns what it
// answered, whole (head and body), or "" when it answered nothing within the deadline.
struct Raw {
  int fd = -1;
  explicit Raw(const std::string& unix_path, int port = 0) {
    if (port) {
      fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0) ADD_FAILURE() << "connect";
    } else {
      fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::strncpy(a.sun_path, unix_path.c_str(), sizeof a.sun_path - 1);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0) ADD_FAILURE() << "connect";
    }
  }
  ~Raw() { ::close(fd); }
  // Sends until done or the peer stops reading; true when everything was sent.
  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, 10000) <= 0) return false;
      ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  std::string answer(int deadline_ms = 20000) {
    std::string out;
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(deadline_ms);
    char buf[65536];
    while (std::chrono::steady_clock::now() < until) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
      size_t head = out.find("\r\n\r\n");
      if (head == std::string::npos) continue;
      size_t cl = out.find("Content-Length: ");
      if (cl != std::string::npos && cl < head &&
          out.size() >= head + 4 + std::stoul(out.substr(cl + 16)))
        break;
    }
    return out;
  }
};

int status_of(const std::string& answer) { return answer.size() > 12 ? std::atoi(answer.c_str() + 9) : 0; }
std::string code_of(const std::string& answer) {
  size_t at = answer.find("\r\n\r\n");
  if (at == std::string::npos) return "";
  Json j = Json::parse(answer.substr(at + 4), nullptr, false);
  return j.is_object() && j.contains("error") ? j["error"].value("code", "") : "";
}

std::string chunked(size_t chunks, size_t each) {
  std::string one = fmt::format("{:x}\r\n{}\r\n", each, std::string(each, 'a'));
  std::string out;
  for (size_t i = 0; i < chunks; ++i) out += one;
  return out + "0\r\n\r\n";
}

// The soak's memory bound. Under AddressSanitizer freed memory sits in its quarantine (256 MiB by
// default) and every allocation carries redzones, so the daemon's RSS says little there: the
// bound that means something is the plain build's.
#if defined(__SANITIZE_ADDRESS__)
constexpr long kSoakPeakKib = 1024 * 1024;
#else
constexpr long kSoakPeakKib = 200 * 1024;
#endif

class ServeHardening : public ::testing::Test, protected ServeFixtureBase {
 protected:
  void SetUp() override {
    f = std::make_unique<CliFixture>(Identity::Self);
    f->put("src/app.py", "print('hi')\n");
    token_file = f->state_dir() + "/../token";
    std::ofstream(token_file) << token << "\n";
    ::chmod(token_file.c_str(), 0600);
  }
  std::vector<std::string> session_dirs() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(f->state_dir() + "/sessions", ec)) out.push_back(e.path());
    return out;
  }
  std::string token = "hardening-token-0123456789abcdef";
  std::string token_file;
};

// Finding 11: 2 million headers took the daemon from 16 MB to 382 MB before the token was checked.
TEST_F(ServeHardening, TooManyHeadersAreRefusedBeforeTheTokenWithBoundedMemory) {
  start({"--listen", "127.0.0.1:0", "--token-file", token_file});
  long before = rss_kib(srv->pid());
  {
    Raw r("", srv->tcp_port());
    std::string many;
    for (int i = 0; i < 400000; ++i) many += "X-H: v\r\n";
    r.send("GET /v1/health HTTP/1.1\r\nHost: x\r\n" + many + "\r\n");
    std::string a = r.answer();
    EXPECT_EQ(status_of(a), 431) << a.substr(0, 300);
    EXPECT_EQ(code_of(a), "AIRLOCK_REQUEST_HEAD_TOO_LARGE") << a.substr(0, 300);
  }
  {
    Raw r("", srv->tcp_port());
    r.send("GET /" + std::string(20000, 'a') + " HTTP/1.1\r\n\r\n");
    std::string a = r.answer();
    EXPECT_EQ(status_of(a), 431) << a.substr(0, 300);
  }
  {
    Raw r("", srv->tcp_port());
    r.send("GET /v1/health HTTP/1.1\r\nX-Big: " + std::string(9000, 'b') + "\r\n\r\n");
    EXPECT_EQ(code_of(r.answer()), "AIRLOCK_REQUEST_HEAD_TOO_LARGE");
  }
  long after = rss_kib(srv->pid());
  EXPECT_LT(after - before, 16 * 1024) << "RSS grew from " << before << " KiB to " << after << " KiB";
  // A request within the bounds is still served, and still needs the token.
  HttpClient anonymous(srv->tcp_endpoint(""));
  EXPECT_EQ(must(anonymous.get("/v1/health")).status, 401);
  HttpClient authorized(srv->tcp_endpoint(token));
  EXPECT_EQ(must(authorized.get("/v1/health")).status, 200);
}

// A client dribbling its head a byte at a time (slowloris) held a worker for as long as it
// liked: every read came within the read timeout. The whole request has a deadline, checked
// before the token.
TEST_F(ServeHardening, ARequestDribbledPastItsDeadlineIsCutWith408) {
  start({"--listen", "127.0.0.1:0", "--token-file", token_file, "--request-seconds", "1"});
  Raw r("", srv->tcp_port());
  ASSERT_TRUE(r.send("GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: "));
  std::string a;
  for (int i = 0; i < 100 && a.empty(); ++i) {  // a byte every 150 ms, for at most 15 s
    pollfd p{r.fd, POLLIN, 0};
    if (::poll(&p, 1, 150) > 0) {
      a = r.answer();
      break;
    }
    if (!r.send("a")) break;
  }
  if (a.empty()) a = r.answer(2000);
  EXPECT_EQ(status_of(a), 408) << a.substr(0, 300);
  EXPECT_EQ(code_of(a), "AIRLOCK_REQUEST_TIMEOUT") << a.substr(0, 300);
  // A request that arrives whole is served as before.
  HttpClient authorized(srv->tcp_endpoint(token));
  EXPECT_EQ(must(authorized.get("/v1/health")).status, 200);
}

// Finding 11: --max-body-bytes held for Content-Length only; a chunked body was read whole.
TEST_F(ServeHardening, ChunkedBodiesAreHeldToTheBodyLimit) {
  start({"--max-body-bytes", "4096"});
  {
    Raw r(srv->socket());
    r.send("POST /v1/sessions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    r.send(chunked(64, 1024));
    std::string a = r.answer();
    EXPECT_EQ(status_of(a), 413) << a.substr(0, 300);
    EXPECT_EQ(code_of(a), "AIRLOCK_REQUEST_TOO_LARGE") << a.substr(0, 300);
  }
  {  // Framing that two readers could read two ways is refused.
    Raw r(srv->socket());
    r.send("POST /v1/sessions HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    EXPECT_EQ(code_of(r.answer()), "AIRLOCK_PROTOCOL_ERROR");
  }
  {  // A body with no length, which httplib would read to end of file past every limit.
    Raw r(srv->socket());
    r.send("POST /v1/sessions HTTP/1.1\r\nHost: x\r\n\r\n\n\n\n\n");
    std::string a = r.answer();
    EXPECT_EQ(status_of(a), 400) << a.substr(0, 300);
    EXPECT_EQ(code_of(a), "AIRLOCK_PROTOCOL_ERROR") << a.substr(0, 300);
  }
  {  // A head ending in bare LFs, which httplib skips while it waits for the real end.
    Raw r(srv->socket());
    r.send("GET /v1/health HTTP/1.1\r\n\n\n");
    EXPECT_EQ(code_of(r.answer()), "AIRLOCK_PROTOCOL_ERROR");
  }
  {  // A chunked body within the limit is read as before.
    Raw r(srv->socket());
    std::string body = R"({"schema_version": "airlock.task_policy.v1", "nope": 1})";
    r.send("POST /v1/sessions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
           fmt::format("{:x}\r\n{}\r\n0\r\n\r\n", body.size(), body));
    std::string a = r.answer();
    EXPECT_EQ(status_of(a), 422) << a.substr(0, 300);
    EXPECT_EQ(code_of(a), "AIRLOCK_POLICY_INVALID");
  }
  HttpClient c(srv->unix_endpoint());
  EXPECT_EQ(must(c.get("/v1/health")).status, 200);
}

// Finding 12: three sessions with a spent budget locked out the fourth with 503 for ever.
TEST_F(ServeHardening, SpentAndIdleSessionsAreReapedAndFreeTheirSlots) {
  start({"--max-sessions", "3", "--idle-seconds", "3"});
  HttpClient c(srv->unix_endpoint());
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(open(c, policy_json(*f, {{"session_budget_seconds", 2}})));
    if (skipped) GTEST_SKIP() << "no executor for the policy here";
  }
  auto full = must(c.request("POST", "/v1/sessions", policy_json(*f)));
  EXPECT_EQ(full.status, 503) << full.body;
  // The reaper ends them when their budget runs out (health touches no session).
  for (int i = 0; i < 200 && must(c.get("/v1/health")).json()["sessions_open"] != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(must(c.get("/v1/health")).json()["sessions_open"], 0);
  std::string fourth = open(c, policy_json(*f));
  EXPECT_FALSE(fourth.empty());
  for (const auto& id : ids) {
    auto receipts = must(c.get("/v1/sessions/" + id + "/receipts")).json()["receipts"];
    EXPECT_EQ(receipts.back()["kind"], "session.close") << id;
    EXPECT_EQ(receipts.back()["reason"], "budget exhausted") << id;
  }
  // The fourth is left alone: after --idle-seconds without a request the reaper kills it.
  // (Health touches no session; asking for its receipts would.)
  for (int i = 0; i < 200 && must(c.get("/v1/health")).json()["sessions_open"] != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(must(c.get("/v1/health")).json()["sessions_open"], 0);
  Json last = must(c.get("/v1/sessions/" + fourth + "/receipts")).json()["receipts"].back();
  EXPECT_EQ(last["kind"], "session.close");
  EXPECT_EQ(last["how"], "killed");
  EXPECT_EQ(last["reason"], "idle for 3 s");
  EXPECT_TRUE(session_dirs().empty());
}

// Finding 13: 50,000 refused requests wrote 50,002 receipts.
TEST_F(ServeHardening, RefusalsPastTheThresholdAreCountedInOneReceipt) {
  start();
  HttpClient c(srv->unix_endpoint());
  std::string id = open(c, policy_json(*f, {{"max_actions_per_minute", 2}}));
  if (skipped) GTEST_SKIP() << "no executor for the policy here";
  std::string base = "/v1/sessions/" + id;
  size_t limited = 0;
  for (int i = 0; i < 200; ++i) {
    auto r = must(c.post(base + "/read_file", {{"path", "src/app.py"}}));
    limited += r.status == 429 && r.json()["error"]["code"] == "AIRLOCK_RATE_LIMITED";
    auto bad = must(c.request("POST", base + "/list_dir", "{\"path\": "));
    EXPECT_EQ(bad.status, 400);
  }
  EXPECT_EQ(limited, 198u);
  EXPECT_EQ(must(c.post(base + "/close", Json::object())).status, 200);
  auto listed = must(c.get(base + "/receipts")).json();
  Json receipts = listed["receipts"];
  EXPECT_LE(receipts.size(), 1 + 2 + broker::kRefusalReceiptsPerMinute + 2 + 1) << listed.dump();
  uint64_t counted = 0, recorded = 0;
  Json codes = Json::object();
  for (const auto& r : receipts) {
    if (r["kind"] == "refusals.suppressed") {
      counted += r["count"].get<uint64_t>();
      for (const auto& [k, v] : r["codes"].items()) codes[k] = codes.value(k, 0) + v.get<int>();
    }
    recorded += r.value("decision", "") == "refused" && r["kind"] != "refusals.suppressed";
  }
  EXPECT_EQ(counted + recorded, 398u);
  EXPECT_EQ(codes.value("AIRLOCK_RATE_LIMITED", 0) + codes.value("AIRLOCK_PROTOCOL_ERROR", 0), counted);
  EXPECT_EQ(receipts.back()["kind"], "session.close");
  EXPECT_EQ(f->run({"receipts", "verify", listed["path"]}).status, 0);
}

// A per-session and a total disk budget: spent, they refuse by name.
TEST_F(ServeHardening, DiskBudgetsRefuseByName) {
  // session.open alone is about 15 KB (the plan and what was enforced).
  start({"--max-session-receipt-bytes", "32768", "--max-state-bytes", "65536"});
  HttpClient c(srv->unix_endpoint());
  std::string id = open(c, policy_json(*f));
  if (skipped) GTEST_SKIP() << "no executor for the policy here";
  std::string base = "/v1/sessions/" + id;
  HttpReply r;
  for (int i = 0; i < 200; ++i) {
    r = must(c.post(base + "/read_file", {{"path", "src/app.py"}}));
    if (r.status != 200) break;
  }
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.json()["error"]["code"], "AIRLOCK_CAPACITY_EXHAUSTED");
  for (int i = 0; i < 100; ++i) must(c.post(base + "/read_file", {{"path", "src/app.py"}}));
  std::string path = must(c.get(base + "/receipts")).json()["path"];
  EXPECT_LT(fs::file_size(path), 32768u + 4096u);
  // More sessions fill the state directory past 64 KiB; then a new session is refused by name.
  HttpReply refused;
  for (int n = 0; n < 8 && refused.status == 0; ++n) {
    auto o = must(c.request("POST", "/v1/sessions", policy_json(*f)));
    if (o.status != 201) {
      refused = o;
      break;
    }
    std::string more = o.json()["session"];
    for (int i = 0; i < 200; ++i)
      if (must(c.post("/v1/sessions/" + more + "/read_file", {{"path", "src/app.py"}})).status != 200) break;
  }
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(refused.json()["error"]["code"], "AIRLOCK_CAPACITY_EXHAUSTED");
  EXPECT_EQ(refused.json()["error"]["facts"]["max_state_bytes"], 65536);
  EXPECT_EQ(f->run({"receipts", "verify", path}).status, 0);
}

// The daemon under mixed concurrent load for a bounded time: sessions opened, used, closed,
// killed and abandoned; hostile requests beside them. Every request is answered, RSS stays
// bounded, every receipt chain verifies, and nothing is left behind.
TEST_F(ServeHardening, SoakUnderMixedHostileLoad) {
  start({"--listen", "127.0.0.1:0", "--token-file", token_file, "--max-body-bytes", "1048576", "--max-sessions", "16",
         "--threads", "32", "--idle-seconds", "3"});
  {
    HttpClient probe(srv->unix_endpoint());
    std::string id = open(probe, policy_json(*f));
    if (skipped) GTEST_SKIP() << "no executor for the policy here";
    must(probe.post("/v1/sessions/" + id + "/close", Json::object()));
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::atomic<long> peak_kib = 0, requests = 0, unanswered = 0, opened = 0;
  std::atomic<bool> done = false;
  auto counted = [&](const Result<HttpReply>& r) {
    ++requests;
    if (!r || r->status == 0) ++unanswered;
  };
  std::vector<std::thread> workers;
  for (int w = 0; w < 3; ++w)
    workers.emplace_back([&, w] {
      HttpClient c(w == 0 ? srv->tcp_endpoint(token) : srv->unix_endpoint());
      for (int round = 0; std::chrono::steady_clock::now() < until; ++round) {
        auto o = c.request("POST", "/v1/sessions", policy_json(*f));
        counted(o);
        if (!o || o->status != 201) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          continue;
        }
        ++opened;
        std::string base = "/v1/sessions/" + o->json()["session"].get<std::string>();
        counted(c.post(base + "/read_file", {{"path", "src/app.py"}}));
        counted(c.post(base + "/write_file", {{"path", "reports/w.txt"}, {"content", "x"}}));
        counted(c.post(base + "/run_tool", {{"tool", "count"}}));
        counted(c.post(base + "/read_file", {{"path", "/etc/shadow"}}));
        for (int i = 0; i < 30; ++i) counted(c.request("POST", base + "/list_dir", "{\"path\": "));
        switch (round % 3) {
          case 0:
            counted(c.post(base + "/close", Json::object()));
            break;
          case 1:
            counted(c.post(base + "/kill", Json::object()));
            break;
          default:
            break;  // abandoned: the idle reaper ends it
        }
      }
    });
  workers.emplace_back([&] {  // hostile requests
    std::string deep = std::string(400000, '[');
    std::string many;
    for (int i = 0; i < 50000; ++i) many += "X-H: v\r\n";
    for (int round = 0; std::chrono::steady_clock::now() < until; ++round) {
      std::string a;
      switch (round % 4) {
        case 0: {
          HttpClient c(srv->unix_endpoint());
          auto r = c.request("POST", "/v1/sessions", deep);
          counted(r);
          if (r) {
            EXPECT_EQ(r->status, 400) << r->body.substr(0, 200);
          }
          continue;
        }
        case 1: {
          Raw r("", srv->tcp_port());
          r.send("GET /v1/health HTTP/1.1\r\n" + many + "\r\n");
          a = r.answer();
          break;
        }
        case 2: {
          Raw r(srv->socket());
          r.send("POST /v1/sessions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
          r.send(chunked(32, 65536));
          a = r.answer();
          break;
        }
        default: {
          Raw r("", srv->tcp_port());
          r.send("POST /v1/sessions HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789");
          a = r.answer();
          EXPECT_EQ(status_of(a), 401);
        }
      }
      ++requests;
      if (status_of(a) == 0) ++unanswered;
    }
  });
  std::thread sampler([&] {
    while (!done) {
      peak_kib = std::max(peak_kib.load(), rss_kib(srv->pid()));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  for (auto& t : workers) t.join();
  done = true;
  sampler.join();
  EXPECT_EQ(unanswered.load(), 0) << "of " << requests.load();
  EXPECT_GT(opened.load(), 3);
  EXPECT_LT(peak_kib.load(), kSoakPeakKib) << "peak RSS " << peak_kib.load() << " KiB";
  // The abandoned sessions end by themselves.
  HttpClient c(srv->unix_endpoint());
  for (int i = 0; i < 200 && must(c.get("/v1/health")).json()["sessions_open"] != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(must(c.get("/v1/health")).json()["sessions_open"], 0);
  EXPECT_EQ(srv->stop(SIGTERM), 0);
  EXPECT_TRUE(session_dirs().empty());
  EXPECT_TRUE(wait_until_gone({"/usr/bin/wc", "-c", "src/app.py"}));
  size_t chains = 0;
  for (const auto& e : fs::directory_iterator(f->state_dir() + "/receipts")) {
    auto v = f->run({"receipts", "verify", e.path()});
    EXPECT_EQ(v.status, 0) << e.path() << v.err;
    ++chains;
  }
  EXPECT_GT(chains, 3u);
  std::fprintf(stderr, "soak: %ld requests, %ld sessions, peak RSS %ld KiB, %zu chains verified\n", requests.load(),
               opened.load(), peak_kib.load(), chains);
}

}  // namespace
}  // namespace airlock::testing
