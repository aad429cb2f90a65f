// clock: the system's wall clock, or a test's.
#include "base/clock.h"

#include <atomic>
#include <chrono>

namespace airlock {
namespace {
std::atomic<ClockFn> g_clock{nullptr};
}  // namespace

int64_t now_us() {
  if (ClockFn fn = g_clock.load(std::memory_order_acquire)) return fn();
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void set_clock_for_tests(ClockFn fn_us) { g_clock.store(fn_us, std::memory_order_release); }

}  // namespace airlock
