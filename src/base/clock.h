// clock: wall-clock time, the one clock records are stamped with (receipts, the effect ledger,
// the run store, tool programs). Tests may drive it. Durations and deadlines use
// std::chrono::steady_clock instead; the child side of a launch reads CLOCK_MONOTONIC itself.
#pragma once

#include <cstdint>
#include <string>

namespace airlock {

// Microseconds since the Unix epoch.
int64_t now_us();
// Milliseconds since the Unix epoch.
inline int64_t now_ms() { return now_us() / 1000; }

// A time as UTC in RFC 3339 form, "2026-12-03T06:48:27Z", with `fraction_digits` (0, 3 or 6)
// of the second after a dot: what every record and listing prints.
std::string utc_text(int64_t us, int fraction_digits = 0);

// Test seam: every later reading comes from `fn` (nullptr: the system clock again).
using ClockFn = int64_t (*)();
void set_clock_for_tests(ClockFn fn_us);

}  // namespace airlock
