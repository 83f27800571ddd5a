#include "areal/recover/run_recovery.h"

#include <signal.h>

#include <filesystem>

#include "areal/config/run_paths.h"
#include "areal/util/error.h"
#include "areal/util/log.h"
#include "areal/util/stop_signal.h"
#include "areal/util/strings.h"

namespace areal {

std::string recover_dir(const Config& cfg) { return (std::filesystem::path(run_dir(cfg)) / "recover").string(); }

bool recover_enabled(const Config& cfg) { return cfg.recover.mode != "disabled" && cfg.recover.mode != "off"; }

std::optional<RecoverPoint> find_resume_point(const Config& cfg) {
  if (!recover_enabled(cfg)) return std::nullopt;
  const std::string dir = recover_dir(cfg);
  std::optional<RecoverPoint> point = read_recover_point(dir);
  if (!point) {
    if (cfg.recover.mode == "resume")
      throw ConfigError(cat("option 'recover.mode' = resume: there is no recover checkpoint in ", dir,
                            " (use auto to start afresh when there is none)"));
    return std::nullopt;
  }
  if (point->job != cfg.job)
    throw ConfigError(cat("option 'recover.mode' = ", cfg.recover.mode, ": the recover checkpoint in ", dir,
                          " was written by --job ", point->job, ", not ", cfg.job,
                          " (use another trial_name, or recover.mode disabled)"));
  if (!point->has_optimizer && !cfg.recover.no_load_optim)
    throw ConfigError(cat("the recover checkpoint in ", dir, " has no optimizer state (written with "
                          "recover.no_save_optim); set recover.no_load_optim true to resume with fresh moments"));
  return point;
}

RunRecovery::RunRecovery(const Config& cfg, std::string job, int64_t steps_per_epoch, Communicator& comm,
                         Policy& policy, ShardedAdamW& optimizer)
    : cfg_(cfg),
      job_(std::move(job)),
      steps_per_epoch_(steps_per_epoch),
      comm_(comm),
      model_(policy.shards()),
      optimizer_(optimizer),
      last_write_(std::chrono::steady_clock::now()) {
  install_stop_signal_handlers();
}

std::optional<RecoverPoint> RunRecovery::resume() {
  std::optional<RecoverPoint> point = find_resume_point(cfg_);
  if (!point) return std::nullopt;
  const bool load_optimizer = !cfg_.recover.no_load_optim;
  load_recover_checkpoint(recover_dir(cfg_), *point, model_, load_optimizer ? &optimizer_ : nullptr);
  log::info(cat("recover: resuming after step ", point->steps_done, " from ", recover_dir(cfg_), " (written by ",
                point->world_size, point->world_size == 1 ? " rank" : " ranks",
                point->world_size != model_.world_size() ? ", re-sharded" : "",
                load_optimizer ? "" : "; AdamW moments start from zero (recover.no_load_optim)", ")"));
  return point;
}

void RunRecovery::after_step(int64_t steps_done, bool last, const std::map<std::string, double>& figures) {
  const RecoverConfig& rc = cfg_.recover;
  const bool enabled = recover_enabled(cfg_);
  const double since_write = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_write_).count();
  // Ranks decide together: a signal may reach one rank only, and clocks differ.
  const bool secs_due = enabled && rc.freq_secs > 0 && since_write >= static_cast<double>(rc.freq_secs);
  at::Tensor flags = at::tensor({static_cast<double>(stop_signal_received()), secs_due ? 1.0 : 0.0}, at::kDouble);
  comm_.all_reduce(flags, ReduceOp::Max);
  const int signal_number = static_cast<int>(flags[0].item<double>());
  const bool due = enabled && !last &&
                   (flags[1].item<double>() > 0 || (rc.freq_steps > 0 && steps_done % rc.freq_steps == 0) ||
                    (rc.freq_epochs > 0 && steps_done % (rc.freq_epochs * steps_per_epoch_) == 0));
  if (due || signal_number != 0) write(steps_done, figures);
  if (signal_number != 0)
    throw StopRequested(cat("stopped by ", signal_number == SIGUSR1 ? "SIGUSR1" : "SIGTERM", " after step ",
                            steps_done, "; the recover checkpoint is in ", recover_dir(cfg_),
                            ": run the same command with recover.mode auto to continue (exit code ", kExitStopped,
                            ")"));
}

void RunRecovery::write(int64_t steps_done, const std::map<std::string, double>& figures) {
  const auto start = std::chrono::steady_clock::now();
  RecoverPoint point;
  point.job = job_;
  point.steps_done = steps_done;
  point.figures = figures;
  write_recover_checkpoint(recover_dir(cfg_), point, model_, cfg_.recover.no_save_optim ? nullptr : &optimizer_,
                           comm_);
  last_write_ = std::chrono::steady_clock::now();
  log::info(cat("recover: checkpoint after step ", steps_done, " written to ", recover_dir(cfg_), " (",
                format_fixed(std::chrono::duration<double>(last_write_ - start).count(), 1), " s)"));
}

}  // namespace areal
