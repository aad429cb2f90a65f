// undeclared_tool: run a tool the policy does not declare (sh, reading the secret).
#include "broker/attack.h"

namespace airlock::broker::attacks::undeclared_tool {

Result<AttackResult> run(AttackContext& c) {
  const std::string code(to_name(Code::ToolNotDeclared));
  auto r = c.session.run_tool("sh", {"-c", "cat " + c.secret});
  std::string b = plain_run({"/bin/sh", "-c", "cat " + c.secret});
  return AttackResult{.expected = code,
                      .broker = answer(r),
                      .contained = answer(r) == code,
                      .baseline_breached = c.leaks(b),
                      .detail = why(r),
                      .baseline_detail = "execve ran sh, which read the secret"};
}

}  // namespace airlock::broker::attacks::undeclared_tool
