// Error types and the exit codes they map to.
#pragma once

#include <stdexcept>
#include <string>

namespace areal {

// Exit codes of areal-train.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntimeError = 1;  // failed while running (I/O, collectives, ...)
inline constexpr int kExitConfigError = 2;   // bad command line or config; nothing was started
inline constexpr int kExitStopped = 75;      // stopped by SIGTERM/SIGUSR1 after writing a recover checkpoint

// A bad option, value, config file or combination of options. Thrown before any
// device or collective is touched; the message names the option (and file:line:col
// where the value came from a file) and says what is wrong.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Every rank throws it at the same step when a stop signal (SIGTERM, SIGUSR1) reached
// any rank and the recover checkpoint is written: the job ends with kExitStopped.
class StopRequested : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace areal
