// clock: the system's wall clock, or a test's.
#include "base/clock.h"

#include <atomic>
#include <chrono>
#include <ctime>

#include <fmt/format.h>

namespace airlock {
namespace {
std::atomic<ClockFn> g_clock{nullptr};
}  // namespace

int64_t now_us() {
  if (ClockFn fn = g_clock.load(std::memory_order_acquire)) return fn();
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string utc_text(int64_t us, int fraction_digits) {
  int64_t secs = us / 1000000, frac = us % 1000000;
  if (frac < 0) {
    secs -= 1;
    frac += 1000000;
  }
  std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  if (!::gmtime_r(&t, &tm)) return "?";
  std::string out = fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                                tm.tm_hour, tm.tm_min, tm.tm_sec);
  if (fraction_digits == 3) out += fmt::format(".{:03}", frac / 1000);
  if (fraction_digits == 6) out += fmt::format(".{:06}", frac);
  return out + "Z";
}

void set_clock_for_tests(ClockFn fn_us) { g_clock.store(fn_us, std::memory_order_release); }

}  // namespace airlock
