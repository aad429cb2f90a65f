// A broker session for the protocol fuzz targets: host executor, development profile, a workspace
// with a file whose name is not UTF-8, no tools and no egress. Reopened whenever one ends.
#pragma once

#include <memory>

#include "broker/session.h"
#include "fuzz_support.h"
#include "linux/probe.h"
#include "policy/task_policy.h"

namespace airlock::fuzz {

class SessionHarness {
 public:
  SessionHarness() {
    std::string ws = scratch_dir() + "/ws";
    if (!make_dirs(ws + "/src") || !make_dirs(ws + "/out") ||
        !write_file_atomic(ws + "/src/a.txt", "alpha\n") ||
        !write_file_atomic(ws + "/src/\xff", "not utf-8\n") || !make_dirs(scratch_dir() + "/state"))
      std::abort();
    std::string text = fmt::format(R"({{"schema_version": "airlock.task_policy.v1", "executor": "host",
      "workspace": "{}", "readable": ["src"], "write_back_paths": ["out"],
      "limits": {{"max_actions_per_minute": 1000000}}}})",
                                   ws);
    auto pol = policy::parse_layer_text(text, policy::builtin_default(), "fuzz policy");
    if (!pol) {
      std::fprintf(stderr, "fuzz policy: %s\n", pol.error().message.c_str());
      std::abort();
    }
    policy_ = *pol;
    facts_ = linux::probe_host(plan::fact_needs(policy_, exec::built_tiers()));
  }
  // The live session, opened anew when the last one ended (closed or killed).
  broker::Session& session() {
    if (!session_ || session_->ended()) {
      if (session_) (void)::unlink(session_->receipts_path().c_str());
      session_.reset();
      broker::SessionOptions so(scratch_dir() + "/state", plan::Profile::Development);
      so.resolver = [](const std::string&) -> Result<std::vector<egress::IpAddress>> {
        return fail(Code::EgressDenied, "the fuzz harness resolves nothing");
      };
      auto s = broker::Session::open(policy_, facts_, so);
      if (!s) {
        std::fprintf(stderr, "fuzz session: %s\n", s.error().message.c_str());
        std::abort();
      }
      session_ = std::move(*s);
    }
    return *session_;
  }
  const policy::TaskPolicy& policy() const { return policy_; }

 private:
  policy::TaskPolicy policy_;
  plan::HostFacts facts_;
  std::unique_ptr<broker::Session> session_;
};

// The one harness of a fuzz process, never destroyed: libFuzzer ends with exit(), by when
// OpenSSL's own exit handler (registered after the harness was made) has torn down what the
// session's last receipt needs to hash. A static object would close its session after that.
inline SessionHarness& session_harness() {
  static SessionHarness* h = new SessionHarness;
  return *h;
}

}  // namespace airlock::fuzz
