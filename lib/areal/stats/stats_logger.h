// Where a run's per-step figures go (rank 0 only): one JSON object per line in
// <run dir>/stats.jsonl, and TensorBoard scalars when stats_logger.tensorboard.path is set.
#pragma once

#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "areal/config/config.h"
#include "areal/stats/tensorboard.h"

namespace areal {

using Stats = std::vector<std::pair<std::string, double>>;  // in the order they are printed

class StatsLogger {
 public:
  // `resumed_step` >= 0: a run resumed after that step keeps the file's rows up to it
  // and appends (open_run_log).
  StatsLogger(const Config& cfg, int rank, int64_t resumed_step = -1);
  void log(int64_t step, const Stats& stats);
  const std::string& jsonl_path() const { return jsonl_path_; }

 private:
  bool active_;
  std::string jsonl_path_;
  std::ofstream jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace areal
