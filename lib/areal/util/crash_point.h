// Test-only fault injection at named points: code that must survive a crash at any
// instant (checkpoint saves, training steps), a rank that stops (the collective
// watchdog), a stop signal (preemption). When the environment variable AREAL_TEST_CRASH_AT names
// the point, the process ends there at once with kCrashPointExitCode: no destructors,
// no flushing, no cleanup, as after kill -9. When AREAL_TEST_THROW_AT names it, the
// point throws std::runtime_error instead (an error on that rank: the job must end by
// itself, in seconds). The variables are read once, at the first point; unset (always,
// outside tests) a point costs a string compare.
#pragma once

#include <string>

namespace areal {

constexpr int kCrashPointExitCode = 86;

void crash_point(const std::string& name);

// The same for a stopped rank: when AREAL_TEST_STOP_AT names the point and
// AREAL_TEST_STOP_RANK is `rank`, the process stops itself (SIGSTOP), as a hung rank.
void stop_point(const std::string& name, int rank);

// And a stop signal: when AREAL_TEST_SIGNAL_AT names the point and AREAL_TEST_SIGNAL_RANK
// is `rank`, the process sends itself SIGTERM (SIGUSR1 with AREAL_TEST_SIGNAL=USR1), as
// a scheduler preempting the job, or Slurm warning of its time limit.
void signal_point(const std::string& name, int rank);

// A slow step: when AREAL_TEST_SLEEP_AT names the point, every rank sleeps
// AREAL_TEST_SLEEP_SECONDS there (time-based saves, recover.freq_secs, made testable).
void sleep_point(const std::string& name);

// All four at a point that every rank reaches (a training step's start).
void fault_points(const std::string& name, int rank);

}  // namespace areal
