#include "areal/stats/stats_logger.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "areal/config/run_paths.h"

namespace areal {

StatsLogger::StatsLogger(const Config& cfg, int rank, int64_t resumed_step) : active_(rank == 0) {
  if (!active_) return;
  jsonl_path_ = (std::filesystem::path(run_dir(cfg)) / "stats.jsonl").string();
  jsonl_ = open_run_log(cfg, "stats.jsonl", resumed_step);
  if (!cfg.stats_logger.tensorboard.path.empty())
    tensorboard_ = std::make_unique<TensorBoardWriter>(cfg.stats_logger.tensorboard.path);
}

void StatsLogger::log(int64_t step, const Stats& stats) {
  if (!active_) return;
  nlohmann::ordered_json row = {{"step", step}};
  for (const auto& [name, value] : stats) {
    row[name] = value;
    if (tensorboard_) tensorboard_->add_scalar(name, step, value);
  }
  jsonl_ << row.dump() << "\n";
  jsonl_.flush();
  if (tensorboard_) tensorboard_->flush();
}

}  // namespace areal
