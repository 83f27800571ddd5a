// The advantage and update stages of an RL step (rl_trainer.h), on this rank's
// rollout: scores -> (DAPO's filter) -> log-probs recomputed where the loss needs them
// -> advantages (advantages.h); then actor.ppo_n_minibatches PPO minibatch updates on
// the sharded engine (ppo_loss.h), each loss over the minibatch's answer tokens of all
// ranks (actor.loss_agg_mode).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "areal/config/config.h"
#include "areal/dist/communicator.h"
#include "areal/fsdp/policy.h"
#include "areal/optim/adamw.h"
#include "areal/rl/rollout_source.h"

namespace areal {

// What the update needs besides the rollout, [rows, L - 1] like its tensors.
// actor.recompute_logprob with one minibatch and no KL: the recomputed log-probs are
// those the update's own forward computes before its only optimizer step, so they are
// taken from it (detached) and no separate forward runs.
bool old_logp_from_update(const ActorConfig& actor);

struct StepAdvantages {
  at::Tensor advantages;
  at::Tensor ratio_base;  // the log-probs the PPO ratio is taken against (undefined: the update's own)
  at::Tensor weights;     // decoupled PPO's behaviour weights (undefined: none)
  at::Tensor ratio_mask;  // loss_mask less the tokens rejection sampling masked (undefined: loss_mask)
  double filtered_tokens = 0;  // this rank's answer tokens rejection sampling masked or clamped
  at::Tensor kl;          // the KL estimate to the reference per token (undefined: no reference)
  at::Tensor kept;        // DAPO's dynamic sampling: 1 per row that stays (undefined: off)
};

// Scores (answer_score), DAPO's filter (which masks the rollout's loss_mask),
// recomputed log-probs and the advantages. Collective.
StepAdvantages compute_advantages(const Config& cfg, StepRollout& rollout, Policy& policy, Communicator& comm,
                                  const at::Device& device);

// Sums over this rank's answer tokens and the minibatches that updated.
struct UpdateFigures {
  double loss = 0;       // sum over the updates of each one's loss
  double forward_tokens = 0;  // the tokens the updates' forwards ran on this rank (0 on tensor ranks > 0)
  double clipped = 0, dual_clipped = 0, entropy = 0;  // token sums
  double grad_norm = 0;  // sum over the updates
  double lr = 0;         // the last update's
  int64_t updates = 0;
};

// The PPO minibatch updates of step `step`. A non-finite loss or gradient skips its
// minibatch with a warning; kMaxBadUpdatesInARow of them in a row (`bad_in_a_row`
// counts across steps) end the job. Collective.
UpdateFigures ppo_update(const Config& cfg, const Rollout& rollout, const StepAdvantages& adv, int64_t step,
                         int64_t total_steps, Policy& policy, ShardedAdamW& optimizer, Communicator& comm,
                         const at::Device& device, int& bad_in_a_row);

}  // namespace areal
