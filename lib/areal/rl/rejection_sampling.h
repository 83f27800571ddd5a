// Decoupled PPO's filter of stale tokens (AReaL's actor.rejection_sampling).
//
// With use_decoupled_loss the PPO ratio is taken against the proximal log-probs (the
// trainer's, recomputed before the update) and each token's loss is weighted by the
// behaviour importance weight r = exp(proximal - behaviour), behaviour being what
// generation sampled with. Tokens whose policy moved too far since are filtered:
//   metric  ratio r, or a KL estimate of log r (kl_k1, kl_k2, kl_k3: advantages.h)
//   level   token: each token alone; sequence: an answer's tokens aggregated (sum,
//           mean, max; for ratio in log space, and the weight of every token is then
//           the answer's geometric-mean ratio), all of its tokens sharing the verdict
//   action  mask: tokens out of [lower, upper] leave the loss (not its divisor);
//           clamp: their weight is clamped to [lower, upper] (ratio only)
// Without a filter (level none, AReaL's `rejection_sampling: null`) there is no weight.
#pragma once

#include <ATen/core/Tensor.h>

#include "areal/config/config.h"

namespace areal {

// The filter a run uses: actor.rejection_sampling, or the one its older spelling
// actor.behav_imp_weight_cap = X stands for (token, mask, ratio, upper X).
RejectionSamplingConfig effective_rejection_sampling(const ActorConfig& actor);

struct RejectionResult {
  at::Tensor weights;       // [rows, T] behaviour weights, 0 where a token left the loss or has no target
  at::Tensor kept;          // [rows, T] float: loss_mask without the tokens the filter masked
  double filtered_tokens = 0;  // of the loss_mask's: masked (mask) or with a clamped weight (clamp)
};

// proximal, behaviour, loss_mask: [rows, T], one answer per row. rs.level != "none".
RejectionResult apply_rejection_sampling(const at::Tensor& proximal_logp, const at::Tensor& behaviour_logp,
                                         const at::Tensor& loss_mask, const RejectionSamplingConfig& rs);

}  // namespace areal
