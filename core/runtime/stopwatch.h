// Wall-clock intervals for timings that are reported (metrics, benchmarks): a monotonic
// clock, so a system clock change never makes a step look negative or huge.
#pragma once

#include <chrono>

namespace fsdpp::runtime {

using SteadyClock = std::chrono::steady_clock;

// Milliseconds from `start` to now.
inline double ms_since(SteadyClock::time_point start) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - start).count();
}

}  // namespace fsdpp::runtime
