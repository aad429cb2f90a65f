// serve_load: many concurrent sessions doing mixed actions against `airlock serve`; checks every answer and chain.
//
// Usage: serve_load (--unix SOCKET | --tcp HOST:PORT --token-file FILE) --policy FILE
//                   [--sessions N] [--actions N] [--seconds S]
// Each of N threads opens its own session and sends up to --actions mixed requests (read_file
// most, then write_file, list_dir, run_tool, a refused read) until --seconds pass, then closes.
// Afterwards every session's receipts are fetched: the chain must verify, every receipt must
// name its own session, and the count of action receipts must equal the requests it sent.
// Prints one JSON object; exits 1 if any request went unanswered or any check failed.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "base/hash.h"
#include "ledger/receipts.h"
#include "server/client.h"
#include "server/server.h"

using namespace airlock;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  server::Endpoint at;
  std::string policy;
  int sessions = 32, actions = 300, seconds = 30;
};

struct SessionRun {
  std::string id, receipts_path;
  std::vector<double> read_us;
  uint64_t requests = 0, unanswered = 0, wrong = 0, actions_sent = 0;
  std::string first_problem;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

void run_session(const Args& a, const std::string& policy, Clock::time_point deadline, SessionRun& out) {
  server::HttpClient c(a.at, 60);
  auto note = [&](const std::string& what) {
    ++out.wrong;
    if (out.first_problem.empty()) out.first_problem = what;
  };
  auto opened = c.request("POST", "/v1/sessions", policy);
  ++out.requests;
  if (!opened) {
    ++out.unanswered;
    out.first_problem = opened.error().message;
    return;
  }
  if (opened->status != 201) return note("open: " + opened->body);
  out.id = opened->json()["session"];
  std::string base = "/v1/sessions/" + out.id;
  std::string mine = "reports/" + out.id + ".txt";
  for (int i = 0; i < a.actions && Clock::now() < deadline; ++i) {
    int kind = i % 10;
    std::string path;
    Json body;
    int want = 200;
    if (kind < 6) {
      path = "/read_file", body = {{"path", "src/app.py"}};
    } else if (kind == 6) {
      path = "/write_file", body = {{"path", mine}, {"content", fmt::format("{} {}\n", out.id, i)}};
    } else if (kind == 7) {
      path = "/list_dir", body = {{"path", "src"}};
    } else if (kind == 8) {
      path = "/read_file", body = {{"path", "../etc/passwd"}}, want = 403;
    } else {
      path = (i % 50 == 9) ? "/run_tool" : "/read_file";
      body = path == "/run_tool" ? Json{{"tool", "count"}} : Json{{"path", mine}};
    }
    auto t0 = Clock::now();
    auto r = c.post(base + path, body);
    double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    ++out.requests;
    ++out.actions_sent;
    if (!r) {
      ++out.unanswered;
      if (out.first_problem.empty()) out.first_problem = r.error().message;
      continue;
    }
    if (r->status != want) note(fmt::format("{} → {} {}", path, r->status, r->body));
    if (path == "/read_file" && want == 200) out.read_us.push_back(us);
  }
  auto closed = c.post(base + "/close", Json{{"write_back", false}});
  ++out.requests;
  if (!closed) ++out.unanswered;
  else if (closed->status != 200) note("close: " + closed->body);
  auto receipts = c.get(base + "/receipts");
  ++out.requests;
  if (!receipts) {
    ++out.unanswered;
    return;
  }
  Json j = receipts->json();
  out.receipts_path = j.value("path", "");
  uint64_t actions = 0;
  for (const auto& rc : j["receipts"]) {
    if (rc["session"] != out.id) note("a receipt of another session in " + out.receipts_path);
    std::string kind = rc["kind"];
    if (kind != "session.open" && kind != "session.close") ++actions;
  }
  if (actions != out.actions_sent)
    note(fmt::format("{} action receipts for {} actions sent", actions, out.actions_sent));
  auto chain = ledger::verify_chain(out.receipts_path);
  if (!chain) note("chain: " + chain.error().message);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--unix") {
      a.at.unix_path = v;
    } else if (k == "--tcp") {
      a.at.host = v.substr(0, v.rfind(':'));
      a.at.port = std::stoi(v.substr(v.rfind(':') + 1));
    } else if (k == "--token-file") {
      auto t = server::read_token_file(v);
      if (!t) return std::fprintf(stderr, "serve_load: %s\n", t.error().message.c_str()), 2;
      a.at.token = *t;
    } else if (k == "--policy") {
      std::ifstream in(v);
      std::stringstream ss;
      ss << in.rdbuf();
      a.policy = ss.str();
    } else if (k == "--sessions") {
      a.sessions = std::stoi(v);
    } else if (k == "--actions") {
      a.actions = std::stoi(v);
    } else if (k == "--seconds") {
      a.seconds = std::stoi(v);
    } else {
      return std::fprintf(stderr, "serve_load: unknown option %s\n", k.c_str()), 2;
    }
  }
  if (a.policy.empty()) return std::fprintf(stderr, "serve_load: --policy FILE is required\n"), 2;
  std::vector<SessionRun> runs(static_cast<size_t>(a.sessions));
  auto start = Clock::now();
  auto deadline = start + std::chrono::seconds(a.seconds);
  std::vector<std::thread> threads;
  for (auto& r : runs) threads.emplace_back([&] { run_session(a, a.policy, deadline, r); });
  for (auto& t : threads) t.join();
  double wall = std::chrono::duration<double>(Clock::now() - start).count();
  uint64_t requests = 0, unanswered = 0, wrong = 0;
  std::vector<double> reads;
  std::string problem;
  for (const auto& r : runs) {
    requests += r.requests;
    unanswered += r.unanswered;
    wrong += r.wrong;
    reads.insert(reads.end(), r.read_us.begin(), r.read_us.end());
    if (problem.empty()) problem = r.first_problem;
  }
  Json report = {{"transport", a.at.unix_path.empty() ? "tcp" : "unix"},
                 {"sessions", a.sessions},
                 {"requests", requests},
                 {"wall_seconds", wall},
                 {"requests_per_second", static_cast<double>(requests) / wall},
                 {"read_file", {{"count", reads.size()},
                                {"p50_us", percentile(reads, 0.50)},
                                {"p99_us", percentile(reads, 0.99)},
                                {"max_us", percentile(reads, 1.0)}}},
                 {"unanswered", unanswered},
                 {"failed_checks", wrong},
                 {"first_problem", problem}};
  std::printf("%s\n", report.dump().c_str());
  return unanswered == 0 && wrong == 0 ? 0 : 1;
}
