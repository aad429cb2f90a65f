// The broker attack suite: one named attack per refusal path, run through a session and, for
// proof that it is real, through plain file, network and process APIs with no broker.
#pragma once

#include <string>
#include <vector>

#include "base/error.h"
#include "base/json_util.h"
#include "plan/host_facts.h"

namespace airlock::broker {

struct AttackResult {
  std::string name = {};  // the attack's row in broker/attacks.inc; the suite fills it in
  std::string expected;  // the refusal code, or what containment means ("pinned", "not followed")
  std::string broker;    // what the broker answered: a code, or "allowed"
  bool contained = false;          // the broker gave the expected answer and nothing leaked
  bool baseline_breached = false;  // the same call without the broker breached
  std::string detail, baseline_detail;
  Json to_json() const;
};

struct AttackSuiteOptions {
  std::string state_dir;  // sessions and their receipts go under it; the suite's files in a temp dir
  plan::HostFacts facts;  // for the sessions' executor (run_tool attacks)
};

// Runs every attack. Servers listen on 127.0.0.1 and 127.0.0.2 only; names resolve through a
// table the suite injects, never the machine's DNS. Everything it made is removed afterwards.
Result<std::vector<AttackResult>> run_attack_suite(const AttackSuiteOptions& opts);

}  // namespace airlock::broker
