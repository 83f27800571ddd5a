// Test-only fault injection at named points of code that must survive a crash at any
// instant (checkpoint saves). When the environment variable AREAL_TEST_CRASH_AT names
// the point, the process ends there at once with kCrashPointExitCode: no destructors,
// no flushing, no cleanup, as after kill -9. Unset (always, outside tests) it costs a
// getenv.
#pragma once

namespace areal {

constexpr int kCrashPointExitCode = 86;

void crash_point(const char* name);

}  // namespace areal
