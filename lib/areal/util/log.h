// Logging with the rank in every line: "[r0/4] ...".
//
// spdlog stays inside log.cpp: torch ships its own fmt and Debian's spdlog is built
// against Debian's fmt, so no header that torch code includes may pull in spdlog.
// Callers build messages with areal::cat(...).
//
// The speaker (rank 0, or the first training rank when generation has ranks of its
// own) logs from `level` up; other ranks log warnings and errors only, unless
// all_ranks is set.
#pragma once

#include <string>

#include "areal/util/strings.h"

namespace areal::log {

enum class Level { debug, info, warn, error };

// Sets the rank shown in the prefix and the filter. Callable again once MPI knows
// the real rank (before MPI_Init the launcher's environment is used, see launcher_rank()).
void configure(int rank, int world_size, const std::string& level, bool all_ranks, int speaker = 0);

// Parses "debug" | "info" | "warn" | "error"; throws ConfigError otherwise.
Level parse_level(const std::string& name);

void write(Level level, const std::string& message);
inline void debug(const std::string& message) { write(Level::debug, message); }
inline void info(const std::string& message) { write(Level::info, message); }
inline void warn(const std::string& message) { write(Level::warn, message); }
inline void error(const std::string& message) { write(Level::error, message); }

// Rank and world size as the launcher (mpirun, srun) announces them in the
// environment, for messages printed before MPI is initialized; {0, 1} when run
// directly.
struct LauncherRank {
  int rank = 0;
  int world_size = 1;
};
LauncherRank launcher_rank();

}  // namespace areal::log
