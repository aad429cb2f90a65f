// clock: wall-clock time, the one clock records are stamped with (receipts, the effect ledger,
// the run store, tool programs). Tests may drive it. Durations and deadlines use
// std::chrono::steady_clock instead; the child side of a launch reads CLOCK_MONOTONIC itself.
#pragma once

#include <cstdint>

namespace airlock {

// Microseconds since the Unix epoch.
int64_t now_us();
// Milliseconds since the Unix epoch.
inline int64_t now_ms() { return now_us() / 1000; }

// Test seam: every later reading comes from `fn` (nullptr: the system clock again).
using ClockFn = int64_t (*)();
void set_clock_for_tests(ClockFn fn_us);

}  // namespace airlock
