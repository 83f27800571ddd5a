#include "areal/util/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <memory>

#include "areal/util/error.h"

namespace areal::log {
namespace {

struct State {
  std::shared_ptr<spdlog::logger> logger;
  int rank = 0;
};

State& state() {
  static State s = [] {
    State init;
    // stderr for every line: stdout stays clean for --print-config and --help output.
    init.logger = spdlog::stderr_color_mt("areal");
    init.logger->set_pattern("[r0/1] %Y-%m-%d %H:%M:%S %^%l%$ %v");
    init.logger->set_level(spdlog::level::info);
    return init;
  }();
  return s;
}

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::debug: return spdlog::level::debug;
    case Level::info: return spdlog::level::info;
    case Level::warn: return spdlog::level::warn;
    case Level::error: return spdlog::level::err;
  }
  return spdlog::level::info;
}

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  return std::atoi(value);
}

}  // namespace

Level parse_level(const std::string& name) {
  if (name == "debug") return Level::debug;
  if (name == "info") return Level::info;
  if (name == "warn") return Level::warn;
  if (name == "error") return Level::error;
  throw ConfigError(cat("log.level: '", name, "' is not one of debug, info, warn, error"));
}

void configure(int rank, int world_size, const std::string& level, bool all_ranks, int speaker) {
  State& s = state();
  s.rank = rank;
  s.logger->set_pattern(cat("[r", rank, "/", world_size, "] %Y-%m-%d %H:%M:%S %^%l%$ %v"));
  Level wanted = parse_level(level);
  if (rank != speaker && !all_ranks && wanted < Level::warn) wanted = Level::warn;
  s.logger->set_level(to_spdlog(wanted));
}

void write(Level level, const std::string& message) {
  state().logger->log(to_spdlog(level), message);
}

LauncherRank launcher_rank() {
  // OpenMPI's mpirun, then PMIx (srun --mpi=pmix), then Slurm itself.
  const std::pair<const char*, const char*> sources[] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMIX_RANK", "SLURM_NTASKS"},
      {"SLURM_PROCID", "SLURM_NTASKS"},
  };
  for (const auto& [rank_var, size_var] : sources) {
    if (std::getenv(rank_var)) return {env_int(rank_var, 0), env_int(size_var, 1)};
  }
  return {};
}

}  // namespace areal::log
