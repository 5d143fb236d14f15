// The steady clock in ns: the scheduler's, the step log's and the replay loops' timings, on
// the clock Python's perf_counter_ns reads (CLOCK_MONOTONIC).
#pragma once

#include <chrono>
#include <cstdint>

namespace steptrace {

inline int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace steptrace
