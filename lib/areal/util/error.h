// Error types and the exit codes they map to.
#pragma once

#include <stdexcept>
#include <string>

namespace areal {

// Exit codes of areal-train.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntimeError = 1;  // failed while running (I/O, collectives, ...)
inline constexpr int kExitConfigError = 2;   // bad command line or config; nothing was started

// A bad option, value, config file or combination of options. Thrown before any
// device or collective is touched; the message names the option (and file:line:col
// where the value came from a file) and says what is wrong.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace areal
