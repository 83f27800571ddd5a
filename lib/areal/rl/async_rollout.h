// The trainers' end of asynchronous RL as a rollout source (rollout_source.h): a step's
// groups come from the queue (async_queue.h), generated and scored on the generation
// ranks; the new weights go to the generation ranks after every update
// (weight_sync.h); generation replica 0's held-out scores are logged as they arrive.
#pragma once

#include <memory>

#include "areal/config/config.h"
#include "areal/fsdp/policy.h"
#include "areal/rl/rl_inputs.h"
#include "areal/rl/rl_trainer.h"
#include "areal/rl/rollout_source.h"
#include "areal/stats/stats_logger.h"

namespace areal {

// `train_rank`, `trainers`: this rank among the trainers. The held-out scores go to
// `stats` and, for the weights of step 0, to summary.eval_before.
std::unique_ptr<RolloutSource> make_async_rollout(const Config& cfg, const RlInputs& inputs, const GenerationLink& link,
                                                  int train_rank, int trainers, Policy& policy, StatsLogger& stats,
                                                  RlSummary& summary);

}  // namespace areal
