// What a broker attack file (broker/attacks/<name>.cpp, one row of broker/attacks.inc) defines and
// may use. Each file defines, in namespace airlock::broker::attacks::<name>,
//   Result<AttackResult> run(AttackContext& c);
// which makes the attack through the broker, then the same call through plain file, network and
// process APIs with no broker (which must breach, or the attack proves nothing), and says which
// came out how. The suite fills in the result's name from the row. An error: the suite's own setup
// failed, and the suite stops.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "broker/attack_suite.h"
#include "broker/loopback_http.h"
#include "broker/session.h"
#include "egress/egress.h"

namespace airlock::broker {

// Three loopback servers: the allowed one on 127.0.0.1, the one an attack wants to reach on
// 127.0.0.2 (same port), and one on another port that only the wildcard rule names. Each counts
// the requests it was sent.
class Servers {
 public:
  Result<void> start();
  static constexpr size_t kBigBytes = 1 << 20;  // what /big answers with
  int port = 0;                                 // good (127.0.0.1) and evil (127.0.0.2)
  int any_port = 0;  // the port the wildcard rule admits: its addresses must be global
  std::atomic<int> good_hits = 0, evil_hits = 0, any_hits = 0;

 private:
  std::unique_ptr<LoopbackHttp> good_, evil_, any_;
};

// The suite's world, shared by every attack, in the order they run.
struct AttackContext {
  std::string ws;       // the workspace: out/, ok.txt ("ordinary\n"), .env (a denied name holding the token)
  std::string view;     // the shared session's view of it
  std::string outside;  // a directory outside the workspace
  std::string secret;   // outside/secret.txt, holding the token
  std::string target;   // outside/target.txt ("original\n"): what a write must not reach
  std::string token;    // the canary: seen anywhere, it leaked
  Servers& servers;
  // The suite's DNS: allowed.test and loopback.test are 127.0.0.1, evil.test 127.0.0.2, and
  // rebind.test 127.0.0.1 on its first lookup since rebind_calls was last set to 0, then 127.0.0.2.
  egress::Resolver resolver;
  std::atomic<int>& rebind_calls;
  Session& session;  // the session most attacks share (60 actions a minute)
  // A session of its own, with this rate limit, for an attack that ends or floods it.
  std::function<Result<std::unique_ptr<Session>>(int per_minute)> open_session;
  std::string state;  // the sessions' state directory: where a person's approvals are kept

  // The `pay` tool, which requires approval: a call through `s` with `args`; and that call asked
  // and approved by the person (ApprovalStore::decide, as `airlock approve` does).
  Result<ToolResult> pay(Session& s, const Json& args) { return s.run_tool("pay", args, std::nullopt); }
  Result<void> ask_and_approve(Session& s, const Json& args);
  // The judgement of an approval attack: the broker must have held `r`, while the pay program run
  // without the broker pays, no approval asked (`baseline_detail` says how that breaches).
  static AttackResult must_hold(const Result<ToolResult>& r, std::string baseline_detail);

  bool leaks(const std::string& s) const { return s.find(token) != std::string::npos; }
};

// What the broker answered: "allowed", or the refusal's code name; and the refusal's message.
template <class T>
std::string answer(const Result<T>& r) {
  return r ? std::string("allowed") : std::string(to_name(r.error().code));
}
template <class T>
std::string why(const Result<T>& r) {
  return r ? std::string() : r.error().message;
}

// The baselines' APIs, with no broker.
struct Plain {
  bool ok = false;
  long status = 0;
  std::string body;
  std::string error;
};
// libcurl as a program would use it, told where names resolve ("host:port:address" entries).
Plain plain_fetch(const std::string& url, const std::vector<std::string>& resolve, bool follow);
// Runs argv (argv[0] a path), returns its stdout.
std::string plain_run(const std::vector<std::string>& argv);
// The file's content, or "".
std::string plain_read(const std::string& path);

}  // namespace airlock::broker
