#include "areal/recover/periodic_saves.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <vector>

#include "areal/config/run_paths.h"
#include "areal/util/log.h"
#include "areal/util/strings.h"

namespace fs = std::filesystem;

namespace areal {

std::string periodic_save_name(int64_t epoch, int64_t epoch_step, int64_t global_step) {
  return cat("epoch", epoch, "epochstep", epoch_step, "globalstep", global_step);
}

bool periodic_due(int64_t steps_done, int64_t steps_per_epoch, int64_t freq_steps, int64_t freq_epochs,
                  int64_t freq_secs, std::chrono::steady_clock::time_point last, Communicator& comm) {
  bool due = (freq_steps > 0 && steps_done % freq_steps == 0) ||
             (freq_epochs > 0 && steps_done % (freq_epochs * steps_per_epoch) == 0);
  if (freq_secs > 0) {
    const double since = std::chrono::duration<double>(std::chrono::steady_clock::now() - last).count();
    at::Tensor flag = at::tensor({since >= static_cast<double>(freq_secs) ? 1.0 : 0.0}, at::kDouble);
    comm.all_reduce(flag, ReduceOp::Max);
    due = due || flag.item<double>() > 0;
  }
  return due;
}

PeriodicSaver::PeriodicSaver(const Config& cfg, int64_t steps_per_epoch, Communicator& comm)
    : cfg_(cfg), steps_per_epoch_(steps_per_epoch), comm_(comm), last_save_(std::chrono::steady_clock::now()) {}

std::string PeriodicSaver::after_step(int64_t steps_done, bool last, const Policy& policy) {
  const SaverConfig& sc = cfg_.saver;
  if (last) return "";
  if (!periodic_due(steps_done, steps_per_epoch_, sc.freq_steps, sc.freq_epochs, sc.freq_secs, last_save_, comm_))
    return "";
  const int64_t index = steps_done - 1;
  const fs::path root = fs::path(run_dir(cfg_)) / "checkpoints";
  const std::string dir =
      (root / periodic_save_name(index / steps_per_epoch_, index % steps_per_epoch_, index)).string();
  policy.save(dir);
  last_save_ = std::chrono::steady_clock::now();
  log::info(cat("saved ", dir));
  if (comm_.rank() == 0 && sc.keep_last > 0) remove_old_saves(root.string());
  return dir;
}

void PeriodicSaver::remove_old_saves(const std::string& root) const {
  static const std::regex name(R"(epoch\d+epochstep\d+globalstep(\d+))");
  std::vector<std::pair<int64_t, fs::path>> saves;  // (global step, directory)
  for (const auto& entry : fs::directory_iterator(root)) {
    std::smatch match;
    const std::string file = entry.path().filename().string();
    if (entry.is_directory() && std::regex_match(file, match, name))
      saves.emplace_back(std::stoll(match[1].str()), entry.path());
  }
  std::sort(saves.begin(), saves.end());
  const size_t keep = static_cast<size_t>(cfg_.saver.keep_last);
  for (size_t i = 0; i + keep < saves.size(); ++i) {
    fs::remove_all(saves[i].second);
    log::info(cat("removed ", saves[i].second.string(), " (saver.keep_last = ", keep, ")"));
  }
}

}  // namespace areal
