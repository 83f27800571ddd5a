#include "areal/util/crash_point.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

namespace areal {
namespace {

// The AREAL_TEST_* variables, read once (the points are on every step's path).
struct FaultPlan {
  std::string crash_at, throw_at, stop_at, signal_at, sleep_at;
  int stop_rank = -1, signal_rank = -1, signal = SIGTERM;
  double sleep_seconds = 0;
};

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

const FaultPlan& plan() {
  static const FaultPlan p = [] {
    FaultPlan p;
    p.crash_at = env("AREAL_TEST_CRASH_AT");
    p.throw_at = env("AREAL_TEST_THROW_AT");
    if (!env("AREAL_TEST_STOP_RANK").empty()) {
      p.stop_at = env("AREAL_TEST_STOP_AT");
      p.stop_rank = std::atoi(env("AREAL_TEST_STOP_RANK").c_str());
    }
    if (!env("AREAL_TEST_SIGNAL_RANK").empty()) {
      p.signal_at = env("AREAL_TEST_SIGNAL_AT");
      p.signal_rank = std::atoi(env("AREAL_TEST_SIGNAL_RANK").c_str());
    }
    if (env("AREAL_TEST_SIGNAL") == "USR1") p.signal = SIGUSR1;
    if (!env("AREAL_TEST_SLEEP_SECONDS").empty()) {
      p.sleep_at = env("AREAL_TEST_SLEEP_AT");
      p.sleep_seconds = std::atof(env("AREAL_TEST_SLEEP_SECONDS").c_str());
    }
    return p;
  }();
  return p;
}

bool at(const std::string& wanted, const std::string& name) { return !wanted.empty() && wanted == name; }

}  // namespace

void crash_point(const std::string& name) {
  if (at(plan().crash_at, name)) ::_exit(kCrashPointExitCode);
  if (at(plan().throw_at, name)) throw std::runtime_error("test fault at " + name + " (AREAL_TEST_THROW_AT)");
}

void stop_point(const std::string& name, int rank) {
  if (at(plan().stop_at, name) && plan().stop_rank == rank) ::raise(SIGSTOP);
}

void signal_point(const std::string& name, int rank) {
  if (at(plan().signal_at, name) && plan().signal_rank == rank) ::raise(plan().signal);
}

void sleep_point(const std::string& name) {
  if (at(plan().sleep_at, name)) std::this_thread::sleep_for(std::chrono::duration<double>(plan().sleep_seconds));
}

void fault_points(const std::string& name, int rank) {
  crash_point(name);
  sleep_point(name);
  stop_point(name, rank);
  signal_point(name, rank);
}

}  // namespace areal
