// running_tool_after_kill: a tool still running when the kill switch is thrown must end with it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "broker/attack.h"

namespace airlock::broker::attacks::running_tool_after_kill {

Result<AttackResult> run(AttackContext& c) {
  const std::string code(to_name(Code::SessionKilled));
  auto k = TRY(c.open_session(60));
  Result<ToolResult> r = fail(Code::InternalError, "did not run");
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
  return AttackResult{.expected = code,
                      .broker = answer(r),
                      .contained = answer(r) == code && secs < 20,
                      .baseline_breached = alive,
                      .detail = fmt::format("the tool ended {:.1f} s after it started: {}", secs, why(r)),
                      .baseline_detail = "sleep 30 ran on after the kill request"};
}

}  // namespace airlock::broker::attacks::running_tool_after_kill
