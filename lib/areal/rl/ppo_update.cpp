#include "areal/rl/ppo_update.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "areal/fsdp/micro_batches.h"
#include "areal/optim/lr_schedule.h"
#include "areal/rl/advantages.h"
#include "areal/rl/ppo_loss.h"
#include "areal/rl/rejection_sampling.h"
#include "areal/util/log.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

constexpr int kMaxBadUpdatesInARow = 3;  // non-finite losses or gradients in a row before the job stops

// Log-probs and entropies [R, W] of a micro-batch's targets at the positions `mask`
// marks (0 elsewhere): the head runs on those only (the answers' tokens; a prompt's
// positions predict nothing the loss reads). Collective, like MicroBatch::forward.
TokenLogprobs answer_token_logprobs(const MicroBatch& mb, Policy& policy, PolicyWeights weights, const at::Tensor& mask,
                                    double temperature, double loss_share = 0) {
  const at::Tensor logits = mb.forward_at(policy, mask, weights, loss_share);  // [P, vocab]
  const at::Tensor targets = mb.targets().masked_select(mask);
  if (policy.vocab_parallel()) {  // this rank's vocabulary columns (tensor parallelism)
    auto [logprobs, entropy] = policy.vocab_logprobs(logits, targets, temperature, /*entropy=*/true);
    return {MicroBatch::spread(mask, logprobs), MicroBatch::spread(mask, entropy)};
  }
  const TokenLogprobs at = token_logprobs(logits.unsqueeze(0), targets.unsqueeze(0), temperature);
  return {MicroBatch::spread(mask, at.logprobs.squeeze(0)), MicroBatch::spread(mask, at.entropy.squeeze(0))};
}

// The rollout's rows for micro-batches, a group's answers sharing their prompt
// (actor.share_prompts; MicroBatch) unless under dynamic NTK scaling, whose rotary
// tables depend on each whole sequence's length.
PaddedSequences update_sequences(const ActorConfig& actor, const Policy& policy, const Rollout& r) {
  return r.sequences(actor.share_prompts && policy.config().rope_scaling.type != "dynamic");
}

// The update's micro-batch token budget: actor.mb_spec's; at 0 (one micro-batch per
// minibatch), packed without a budget where the rows share their prompts (AReaL's one
// micro-batch is packed too), else padded.
int64_t micro_batch_tokens(const ActorConfig& actor, const Policy& policy, const PaddedSequences& set) {
  if (actor.mb_spec.max_tokens_per_mb > 0) return actor.mb_spec.max_tokens_per_mb;
  return shares_prompts(set, policy.context_chunk()) ? std::numeric_limits<int64_t>::max() / 2 : 0;
}

// Log-probs of the rollout's targets under the policy's `weights` without a graph:
// [rows, L - 1] on the CPU, in n_chunks chunks of micro-batches (actor.mb_spec).
// Collective.
at::Tensor score_rollout(Policy& policy, PolicyWeights weights, const Rollout& r, int64_t n_chunks,
                         const ActorConfig& actor, const at::Device& device) {
  at::NoGradGuard no_grad;
  const PaddedSequences set = update_sequences(actor, policy, r);
  const int64_t rows = r.ids.size(0), max_tokens_per_mb = micro_batch_tokens(actor, policy, set);
  const double temperature = actor.temperature;
  at::Tensor out = at::zeros_like(r.old_logp);
  for (int64_t c = 0; c < n_chunks; ++c) {
    for (const MicroBatch& mb : micro_batches(set, rows * c / n_chunks, rows * (c + 1) / n_chunks, max_tokens_per_mb,
                                              policy.comm(), device, policy.context_chunk())) {
      mb.put_back(answer_token_logprobs(mb, policy, weights, mb.lay_out(r.loss_mask) > 0, temperature).logprobs.cpu(),
                  out);
    }
  }
  // Context parallelism: each rank wrote its chunk's positions; the group's sum is every row.
  if (Communicator* group = policy.context_comm()) group->all_reduce(out, ReduceOp::Sum);
  return out * r.loss_mask;
}

// One minibatch's sums (this rank's) and whether its loss was finite on every rank.
struct MinibatchSums {
  double loss = 0, clipped = 0, dual_clipped = 0, entropy = 0;
  double forward_tokens = 0;  // what the micro-batches' forwards ran (a tensor-parallel group's once)
  bool finite = true;
};

// Micro-batches accumulate gradients. Each one's loss is summed over all ranks before
// its backward: a non-finite one skips the whole minibatch's update.
MinibatchSums minibatch_backward(const Config& cfg, const Rollout& r, const StepAdvantages& adv,
                                 const at::Tensor& loss_weights, const at::Tensor& answer_ids, int64_t begin,
                                 int64_t end, double global_units, double global_tokens, Policy& policy,
                                 Communicator& comm,
                                 const at::Device& device) {
  const ActorConfig& actor = cfg.actor;
  MinibatchSums sums;
  const PaddedSequences set = update_sequences(actor, policy, r);
  for (const MicroBatch& mb :
       micro_batches(set, begin, end, micro_batch_tokens(actor, policy, set), comm, device, policy.context_chunk())) {
    // The micro-batch's share of the minibatch's loss tokens (a mixture of experts'
    // load-balancing loss follows it: Policy::forward).
    const at::Tensor loss_mask = mb.lay_out(r.loss_mask);
    const double share = loss_mask.sum().item<double>() / global_tokens;
    // The tokens rejection sampling masked leave the GSPO mean and the clip counts too.
    const at::Tensor mask = mb.lay_out(adv.ratio_mask.defined() ? adv.ratio_mask : r.loss_mask);
    TokenLogprobs tl = answer_token_logprobs(mb, policy, PolicyWeights::current, loss_mask > 0, actor.temperature, share);
    // 0 where no log-prob was computed (a row dynamic sampling dropped keeps its behaviour
    // log-probs): the ratio there is 1, never an overflow times a zero weight.
    const at::Tensor base = adv.ratio_base.defined() ? mb.lay_out(adv.ratio_base).masked_fill(loss_mask <= 0, 0)
                                                     : tl.logprobs.detach();
    const at::Tensor logp =
        answer_ids.defined() ? sequence_level_logp(tl.logprobs, base, mask, mb.lay_out(answer_ids)) : tl.logprobs;
    PpoTokenLoss pl =
        ppo_token_loss(logp, base, mb.lay_out(adv.advantages), actor.eps_clip, actor.eps_clip_higher, actor.c_clip);
    at::Tensor token_loss = adv.weights.defined() ? pl.loss * mb.lay_out(adv.weights) : pl.loss;
    at::Tensor local = (token_loss * mb.lay_out(loss_weights)).sum();
    // The ranks of a tensor-parallel group have the same loss: the first one's counts.
    at::Tensor part = local.detach().to(at::kDouble).cpu().reshape({1}) * (policy.tensor_rank() == 0 ? 1.0 : 0.0);
    comm.all_reduce(part, ReduceOp::Sum);
    if (!std::isfinite(part.item<double>())) {
      sums.finite = false;
      break;
    }
    // The engine averages gradients over ranks; the factor undoes it, so the gradient is
    // that of the minibatch's loss over all ranks.
    (local * (static_cast<double>(comm.world_size()) / global_units)).backward();
    sums.loss += part.item<double>();
    sums.clipped += (pl.clipped.to(at::kFloat) * mask).sum().item<double>();
    sums.dual_clipped += (pl.dual_clipped.to(at::kFloat) * mask).sum().item<double>();
    sums.entropy += (tl.entropy * mask).sum().item<double>();
    if (!mb.rows().empty() && policy.tensor_rank() == 0) sums.forward_tokens += static_cast<double>(mb.tokens());
  }
  return sums;
}

}  // namespace

bool old_logp_from_update(const ActorConfig& actor) {
  return actor.recompute_logprob && !actor.use_decoupled_loss && actor.ppo_n_minibatches == 1 && actor.kl_ctl == 0;
}

StepAdvantages compute_advantages(const Config& cfg, StepRollout& rollout, Policy& policy, Communicator& comm,
                                  const at::Device& device) {
  const ActorConfig& actor = cfg.actor;
  Rollout& r = rollout.batch;
  const int64_t n_samples = cfg.gconfig.n_samples, n_minibatches = actor.ppo_n_minibatches;
  StepAdvantages adv;
  // Scores: raw reward (+ DAPO's overlong penalty), transformed.
  std::vector<double> scores;
  for (size_t i = 0; i < r.rewards.size(); ++i)
    scores.push_back(answer_score(r.rewards[i], r.answer_lengths[i], actor, cfg.gconfig.max_new_tokens));
  const at::Tensor score_tensor = at::tensor(scores, at::kFloat);
  // DAPO's dynamic sampling: groups without a signal leave the step (no loss, no tokens,
  // no part in the batch statistics); with the refill, so do the groups beyond the batch.
  if (actor.dynamic_sampling) {
    adv.kept = rollout.refilled
                   ? at::tensor(rollout.refill_kept, at::kFloat).repeat_interleave(n_samples)
                   : groups_with_signal(score_tensor, n_samples, &policy.data_comm());
    r.loss_mask *= adv.kept.unsqueeze(1);
  }
  // Decoupled PPO keeps generation's log-probs as the behaviour's and recomputes the
  // proximal ones; otherwise recompute_logprob replaces them.
  at::Tensor proximal_logp;
  if (old_logp_from_update(actor)) {
    adv.ratio_base = at::Tensor();  // the update's forward gives them
  } else {
    if (actor.use_decoupled_loss || actor.recompute_logprob) {
      at::Tensor recomputed = score_rollout(policy, PolicyWeights::current, r, n_minibatches, actor, device);
      (actor.use_decoupled_loss ? proximal_logp : r.old_logp) = recomputed;
    }
    adv.ratio_base = actor.use_decoupled_loss ? proximal_logp : r.old_logp;
  }
  const RejectionSamplingConfig rs = effective_rejection_sampling(actor);
  if (actor.use_decoupled_loss && rs.level != "none") {
    RejectionResult filter = apply_rejection_sampling(proximal_logp, r.old_logp, r.loss_mask, rs);
    adv.weights = filter.weights;
    adv.ratio_mask = filter.kept;
    adv.filtered_tokens = filter.filtered_tokens;
  }
  if (policy.has_reference()) {
    const at::Tensor ref_logp = score_rollout(policy, PolicyWeights::reference, r, n_minibatches, actor, device);
    adv.kl = kl_estimate(r.old_logp, ref_logp, actor.kl_estimator) * r.loss_mask;
  }
  // Batch statistics count every answer once (with context parallelism a group's ranks share theirs).
  Communicator& rows_comm = policy.data_comm();
  at::Tensor normalized = normalize_rewards(score_tensor, actor.reward_norm, &rows_comm, adv.kept);
  if (actor.mask_no_eos_with_zero) normalized = normalized * (1 - at::tensor(r.truncated_rows, at::kFloat));
  const at::Tensor advantages =
      token_advantages(normalized, adv.kl, r.loss_mask, actor.kl_ctl, actor.discount, actor.gae_lambda);
  adv.advantages = normalize_advantages(advantages, r.loss_mask, actor.adv_norm, n_samples, &rows_comm);
  return adv;
}

UpdateFigures ppo_update(const Config& cfg, const Rollout& r, const StepAdvantages& adv, int64_t step,
                         int64_t total_steps, Policy& policy, ShardedAdamW& optimizer, Communicator& comm,
                         const at::Device& device, int& bad_in_a_row) {
  const ActorConfig& actor = cfg.actor;
  const int64_t rows = r.ids.size(0), n_minibatches = actor.ppo_n_minibatches;
  // Each minibatch's loss: weighted token losses over its units of all ranks (loss_agg_mode).
  const at::Tensor loss_weights = loss_token_weights(r.loss_mask, actor.loss_agg_mode, cfg.gconfig.max_new_tokens);
  // Per minibatch over all ranks: its units and its loss tokens.
  at::Tensor mb_units = at::zeros({2, n_minibatches}, at::kDouble);
  for (int64_t m = 0; m < n_minibatches; ++m) {
    const at::Tensor mask =
        r.loss_mask.narrow(0, rows * m / n_minibatches, rows * (m + 1) / n_minibatches - rows * m / n_minibatches);
    mb_units[0][m] = loss_units(mask, actor.loss_agg_mode);
    mb_units[1][m] = mask.sum().item<double>();
  }
  policy.data_comm().all_reduce(mb_units, ReduceOp::Sum);  // every answer once
  // GSPO: which answer each target position belongs to (packed rows hold several).
  const at::Tensor answer_ids = actor.importance_sampling_level == "sequence"
                                    ? at::arange(rows, at::kFloat).unsqueeze(1).expand_as(r.loss_mask).contiguous()
                                    : at::Tensor();
  UpdateFigures figures;
  for (int64_t m = 0; m < n_minibatches; ++m) {
    const int64_t begin = rows * m / n_minibatches, end = rows * (m + 1) / n_minibatches;
    const double global_units = std::max(1.0, mb_units[0][m].item<double>());
    const double global_tokens = std::max(1.0, mb_units[1][m].item<double>());
    optimizer.zero_grad();
    const MinibatchSums sums = minibatch_backward(cfg, r, adv, loss_weights, answer_ids, begin, end, global_units,
                                                  global_tokens, policy, comm, device);
    if (!sums.finite) {
      log::warn(cat("step ", step + 1, " minibatch ", m + 1, ": the loss is not finite; the update was skipped"));
      if (++bad_in_a_row >= kMaxBadUpdatesInARow)
        throw std::runtime_error(cat(kMaxBadUpdatesInARow, " updates in a row had a non-finite loss; stopping "
                                     "(lower optimizer.lr, or check the data and the model)"));
      continue;
    }
    figures.lr = learning_rate(cfg.optimizer, step * n_minibatches + m, total_steps * n_minibatches);
    StepResult result = optimizer.step(figures.lr);
    if (result.skipped) {
      log::warn(cat("step ", step + 1, " minibatch ", m + 1, ": the gradient norm is not finite; skipped"));
      if (++bad_in_a_row >= kMaxBadUpdatesInARow)
        throw std::runtime_error(cat(kMaxBadUpdatesInARow, " updates in a row had a non-finite gradient; stopping"));
      continue;
    }
    bad_in_a_row = 0;
    figures.grad_norm += result.grad_norm;
    ++figures.updates;
    figures.loss += sums.loss / global_units;
    figures.clipped += sums.clipped;
    figures.dual_clipped += sums.dual_clipped;
    figures.entropy += sums.entropy;
    figures.forward_tokens += sums.forward_tokens;
  }
  // Context parallelism: the token figures of the group's chunks, on each of its ranks.
  if (Communicator* group = policy.context_comm()) {
    at::Tensor token_sums = at::tensor({figures.clipped, figures.dual_clipped, figures.entropy}, at::kDouble);
    group->all_reduce(token_sums, ReduceOp::Sum);
    figures.clipped = token_sums[0].item<double>();
    figures.dual_clipped = token_sums[1].item<double>();
    figures.entropy = token_sums[2].item<double>();
  }
  return figures;
}

}  // namespace areal
