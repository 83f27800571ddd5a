// The report stage of an RL step (rl_trainer.h): this rank's figures of the step,
// summed or maxed over all ranks into named statistics, then one line on rank 0 and a
// row of stats.jsonl / TensorBoard (stats_logger.h).
#pragma once

#include <cstdint>
#include <string>

#include "areal/dist/communicator.h"
#include "areal/rl/ppo_update.h"
#include "areal/rl/rollout_source.h"
#include "areal/stats/stats_logger.h"

namespace areal {

// A step over all ranks.
struct StepStats {
  int64_t step = 0, total_steps = 0, epoch = 0, prompts = 0;  // step counts from 1
  double answers = 0;  // rows (prompt + answer) of all ranks
  double reward_mean = 0, reward_std = 0, accuracy = 0;
  double response_length_mean = 0, response_length_max = 0, truncated_share = 0;
  double loss = 0, clip_fraction = 0, dual_clip_fraction = 0, entropy = 0, kl = 0, grad_norm = 0, lr = 0;
  double rollout_seconds = 0, train_seconds = 0, step_seconds = 0, weight_sync_seconds = 0;
  double gen_tokens_per_second = 0, train_tokens_per_second = 0;
  double train_forward_tokens = 0;  // what the updates' forwards ran, all ranks (shared prompts once, padding counted)
  double peak_memory_bytes = 0, rollout_weight_bytes = 0, rollout_cache_bytes = 0;
  double reward_failures = 0;
  double kept_answers = 0;  // DAPO's dynamic sampling: answers that stayed
  double staleness_mean = 0, staleness_max = 0;  // asynchronous RL
  double filtered_share = 0;  // of the answer tokens: masked or clamped by rejection sampling
  // Multi-turn episodes (0 without): per episode, and counts over the step.
  double episodes = 0, turns_mean = 0, tool_calls_mean = 0, env_seconds_mean = 0;
  double env_failures = 0, limit_ends = 0;
  double masked_token_share = 0;  // of the answer tokens: the environment's (loss mask 0)
};

// This rank's part of the step.
struct StepParts {
  const StepRollout* rollout = nullptr;
  const StepAdvantages* advantages = nullptr;
  const UpdateFigures* update = nullptr;
  double train_seconds = 0, sync_seconds = 0, step_seconds = 0;
};

// Collective: sums and maxima over all ranks.
StepStats gather_step_stats(int64_t step, int64_t total_steps, int64_t epoch, size_t prompts,
                            const StepParts& parts, bool asynchronous, Communicator& comm);

// The row of stats.jsonl (and TensorBoard) and the console line.
Stats stats_row(const Config& cfg, const StepStats& s, const StepRollout& rollout, bool asynchronous);
std::string step_line(const StepStats& s);

}  // namespace areal
