// The recover side of a training loop, the same for SFT and RL: resume from
// <run dir>/recover at the start, write a recover checkpoint when recover.freq_* says
// so, and stop cleanly after a stop signal (util/stop_signal.h). See docs/recovery.md.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "areal/config/config.h"
#include "areal/dist/communicator.h"
#include "areal/fsdp/policy.h"
#include "areal/optim/adamw.h"
#include "areal/recover/recover_checkpoint.h"

namespace areal {

// <run dir>/recover.
std::string recover_dir(const Config& cfg);

// recover.mode is not disabled/off.
bool recover_enabled(const Config& cfg);

// The point a run of cfg.job resumes from: the recover checkpoint in recover_dir(cfg)
// when recover.mode is auto/on/resume and there is one, else nullopt. Errors (a
// ConfigError, before anything is loaded): recover.mode resume without a checkpoint,
// one written by another job, one without optimizer state unless
// recover.no_load_optim. A damaged recover_info.json is a CheckpointError.
std::optional<RecoverPoint> find_resume_point(const Config& cfg);

class RunRecovery {
 public:
  // Installs the stop-signal handlers. `job`: "sft" or "rl".
  RunRecovery(const Config& cfg, std::string job, int64_t steps_per_epoch, Communicator& comm, Policy& policy,
              ShardedAdamW& optimizer);

  // When find_resume_point has a point: loads it into the model and the optimizer
  // (re-sharded when the world size differs), logs where the run continues, and
  // returns it. Else nullopt: a fresh start.
  std::optional<RecoverPoint> resume();

  // Called by every rank after step `steps_done` (counted from 1). Collective: one
  // small all-reduce. Writes a recover checkpoint when one is due (recover.freq_steps,
  // freq_epochs, freq_secs; never after the last step, which the final save follows)
  // or a stop signal reached any rank; after the latter throws StopRequested.
  // `figures`: the loop's values that a resumed run gets back in RecoverPoint::figures.
  void after_step(int64_t steps_done, bool last, const std::map<std::string, double>& figures);

 private:
  void write(int64_t steps_done, const std::map<std::string, double>& figures);

  const Config& cfg_;
  std::string job_;
  int64_t steps_per_epoch_;
  Communicator& comm_;
  ShardedModel& model_;
  ShardedAdamW& optimizer_;
  std::chrono::steady_clock::time_point last_write_;
};

}  // namespace areal
