// Wall-clock intervals for the loops' timings (steady_clock: never jumps).
#pragma once

#include <chrono>

namespace areal {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace areal
