#include "areal/util/crash_point.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace areal {

void crash_point(const char* name) {
  const char* wanted = std::getenv("AREAL_TEST_CRASH_AT");
  if (wanted != nullptr && std::strcmp(wanted, name) == 0) ::_exit(kCrashPointExitCode);
}

void stop_point(const std::string& name, int rank) {
  const char* wanted = std::getenv("AREAL_TEST_STOP_AT");
  const char* wanted_rank = std::getenv("AREAL_TEST_STOP_RANK");
  if (wanted != nullptr && wanted_rank != nullptr && name == wanted && std::atoi(wanted_rank) == rank) ::raise(SIGSTOP);
}

void signal_point(const std::string& name, int rank) {
  const char* wanted = std::getenv("AREAL_TEST_SIGNAL_AT");
  const char* wanted_rank = std::getenv("AREAL_TEST_SIGNAL_RANK");
  const char* which = std::getenv("AREAL_TEST_SIGNAL");  // "USR1", else SIGTERM
  if (wanted != nullptr && wanted_rank != nullptr && name == wanted && std::atoi(wanted_rank) == rank)
    ::raise(which != nullptr && std::strcmp(which, "USR1") == 0 ? SIGUSR1 : SIGTERM);
}

void sleep_point(const std::string& name) {
  const char* wanted = std::getenv("AREAL_TEST_SLEEP_AT");
  const char* seconds = std::getenv("AREAL_TEST_SLEEP_SECONDS");
  if (wanted != nullptr && seconds != nullptr && name == wanted)
    std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(seconds)));
}

void fault_points(const std::string& name, int rank) {
  crash_point(name.c_str());
  sleep_point(name);
  stop_point(name, rank);
  signal_point(name, rank);
}

}  // namespace areal
