// The PPO policy loss per token, with AReaL's clipping options:
//   ratio   = exp(logp - old_logp)
//   loss    = max(-A * ratio, -A * clamp(ratio, 1 - eps_clip, 1 + eps_clip_higher))
//   dual    for A < 0 and c_clip > 1: loss = min(loss, -A * c_clip)
// eps_clip_higher = 0 means eps_clip. The trainer weighs the token losses and divides
// their sum by the minibatch's units over all ranks (loss aggregation, below).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace areal {

struct PpoTokenLoss {
  at::Tensor loss;          // [rows, T], differentiable in logp
  at::Tensor clipped;       // [rows, T] bool: the clipped term was taken
  at::Tensor dual_clipped;  // [rows, T] bool: the dual clip bound was taken
  at::Tensor ratio;         // [rows, T], detached
};

PpoTokenLoss ppo_token_loss(const at::Tensor& logp, const at::Tensor& old_logp, const at::Tensor& advantages,
                            double eps_clip, double eps_clip_higher, double c_clip);

// GSPO (actor.importance_sampling_level: sequence): every token's log-ratio against
// `base` becomes its sequence's mean log-ratio over the answer tokens (`mask`), so the
// ratio, and its clip, is one per answer: the geometric mean of its token ratios.
// Returned as log-probs to take the ratio against `base` (base + that mean), with the
// gradient of the mean. `sequence` names each position's sequence (row ids, as floats:
// a packed micro-batch holds several sequences in a row); positions with mask 0 only
// receive their sequence's value.
at::Tensor sequence_level_logp(const at::Tensor& logp, const at::Tensor& base, const at::Tensor& mask,
                               const at::Tensor& sequence);

// Loss aggregation (actor.loss_agg_mode, veRL's names): a minibatch's loss is
// sum(token_loss * weight) over its rows of all ranks, divided by the units of all ranks.
//   mode                     weight of a token            units
//   token-mean               1                            answer tokens
//   seq-mean-token-sum       1                            answers
//   seq-mean-token-mean      1 / its answer's length      answers
//   seq-mean-token-sum-norm  1 / max_new_tokens           answers (Dr.GRPO's constant)
// Weights are 0 where `mask` [rows, T] is 0; an answer with no token in the mask (left
// out by dynamic sampling) is no unit.
at::Tensor loss_token_weights(const at::Tensor& mask, const std::string& mode, int64_t max_new_tokens);
double loss_units(const at::Tensor& mask, const std::string& mode);

// log p(target) and the entropy of each position's distribution, from logits
// [rows, T, vocab] divided by the temperature; float32 [rows, T] each.
struct TokenLogprobs {
  at::Tensor logprobs;
  at::Tensor entropy;  // detached
};
TokenLogprobs token_logprobs(const at::Tensor& logits, const at::Tensor& targets, double temperature);

}  // namespace areal
