#include "areal/util/crash_point.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

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

void fault_points(const std::string& name, int rank) {
  crash_point(name.c_str());
  stop_point(name, rank);
  signal_point(name, rank);
}

}  // namespace areal
