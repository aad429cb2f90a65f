// arguments_to_a_tool_that_allows_none: pass an argument to a declared tool that takes none.
#include "broker/attack.h"

namespace airlock::broker::attacks::arguments_to_a_tool_that_allows_none {

Result<AttackResult> run(AttackContext& c) {
  const std::string code(to_name(Code::ToolArgsDenied));
  auto r = c.session.run_tool("greet", {"--injected"});
  std::string b = plain_run({"/bin/echo", "hello", "--injected"});
  return AttackResult{.expected = code,
                      .broker = answer(r),
                      .contained = answer(r) == code,
                      .baseline_breached = b.find("--injected") != std::string::npos,
                      .detail = why(r),
                      .baseline_detail = "execve passed the extra argument"};
}

}  // namespace airlock::broker::attacks::arguments_to_a_tool_that_allows_none
