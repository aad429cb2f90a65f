// What the server holds of a session: one open in this process (broker::Session), or one on
// another machine of the fleet, spoken to through `airlock session --machine NAME` as a child.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "base/json_util.h"
#include "broker/session.h"

namespace airlock::server {

class SessionHandle {
 public:
  virtual ~SessionHandle() = default;
  virtual const std::string& id() const = 0;
  // Ended in fact: session.close written (here, or brought back here from the far machine).
  virtual bool ended() const = 0;
  virtual bool killed() const = 0;
  virtual Result<void> kill(std::string_view why) = 0;
  // The console's and GET /v1/sessions' view (broker::Session::status's keys).
  virtual Json status() const = 0;
  virtual Result<void> enforce_budget() = 0;
  // The receipts chain this server keeps of the session, read by the console.
  virtual std::string receipts_path() const = 0;
  virtual Json output_tails() const = 0;
  // One action request, answered as broker::handle_request answers it.
  virtual Json handle(const Json& request) = 0;
  // A request refused before the session saw it, recorded in its receipts.
  virtual Result<void> note_refusal(std::string_view kind, const Json& args, const Error& e) = 0;
};

std::unique_ptr<SessionHandle> local_session(std::unique_ptr<broker::Session> s);

// A session on another machine: `command` is the airlock to run with its global options (state
// directory, store); the gate, the seat, the ssh transport and the binding of the far receipts
// are that verb's (docs/store.md). `opened` gets what the far session said when it opened.
struct FarSessionSpec {
  std::vector<std::string> command;
  std::string state_dir;  // where the policy file handed to the child is written
  std::string machine, workspace;
  Json policy;  // the effective policy, as posted and layered here
  std::string task_id, policy_digest;  // shown in its status
};
Result<std::unique_ptr<SessionHandle>> open_far_session(const FarSessionSpec& spec, Json& opened);

}  // namespace airlock::server
