// From rewards to per-token advantages, as AReaL's PPO actor computes them.
//
// Rows are answers; `group_size` consecutive rows answer the same prompt. Tensors are
// [rows, T] over the answer tokens, with `mask` 1 on real tokens and 0 on padding.
//  1. reward -> score: (reward + reward_bias) * reward_scaling, clipped to +/- reward_clip,
//     then normalized (actor.reward_norm, the same rule as step 4 on one value per answer).
//  2. per-token rewards: -kl_ctl * KL_t (when a reference is used) and the score on the
//     answer's last token.
//  3. returns: the discounted sum of future rewards with GAE (no critic: values are 0),
//     advantage_t = sum_k (discount * gae_lambda)^k r_{t+k}.
//  4. normalization (actor.adv_norm): subtract the mean over the `group` or the `batch`
//     (optionally leaving the row itself out), divide by the std over the `group` or the
//     `batch` plus eps. Statistics are over the masked tokens; `batch` spans all ranks.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "areal/config/config.h"
#include "areal/dist/communicator.h"

namespace areal {

double transform_reward(double reward, const ActorConfig& actor);

// DAPO's soft overlong penalty (actor.overlong_reward_penalty), added to the raw reward
// of an answer of `length` tokens: min(0, -(length - (max_new_tokens - overlong_tokens))
// / overlong_tokens * factor), 0 up to max_new_tokens - overlong_tokens, -factor at
// max_new_tokens.
double overlong_penalty(int64_t length, int64_t max_new_tokens, int64_t overlong_tokens, double factor);

// An answer's score: its raw reward (+ DAPO's overlong penalty when
// actor.overlong_reward_penalty), transformed (transform_reward).
double answer_score(double raw, int64_t length, const ActorConfig& actor, int64_t max_new_tokens);

// DAPO's dynamic sampling (actor.dynamic_sampling): 1 for the answers of groups
// (`group_size` consecutive scores) whose scores differ, 0 for the answers of groups
// whose scores are all equal (no signal). When no group on any rank has a signal, all
// are kept, as AReaL does. Collective when comm is given.
at::Tensor groups_with_signal(const at::Tensor& scores, int64_t group_size, Communicator* comm);

// Per-token KL estimate of the policy that sampled (logp) from the reference (ref_logp):
//   k1 = logp - ref,  k2 = (logp - ref)^2 / 2,  k3 = exp(ref - logp) - (ref - logp) - 1.
at::Tensor kl_estimate(const at::Tensor& logp, const at::Tensor& ref_logp, const std::string& estimator);

// Steps 2 and 3: scores [rows]; kl [rows, T] or undefined (no penalty).
at::Tensor token_advantages(const at::Tensor& scores, const at::Tensor& kl, const at::Tensor& mask, double kl_ctl,
                            double discount, double gae_lambda);

// Step 1's normalization of the scores [rows] (one value per answer). With `keep`
// [rows] (0/1), the statistics leave out the answers of 0, which come back as 0.
at::Tensor normalize_rewards(const at::Tensor& scores, const NormConfig& norm, Communicator* comm,
                             const at::Tensor& keep = {});

// Step 4. `comm` (may be null: this rank's rows are the batch) makes `batch`
// statistics global; groups never straddle ranks. Collective when comm is given.
at::Tensor normalize_advantages(const at::Tensor& advantages, const at::Tensor& mask, const NormConfig& norm,
                                int64_t group_size, Communicator* comm);

}  // namespace areal
