#include "areal/rl/advantages.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>

#include "areal/util/strings.h"

namespace areal {

double transform_reward(double reward, const ActorConfig& actor) {
  const double score = (reward + actor.reward_bias) * actor.reward_scaling;
  return std::clamp(score, -actor.reward_clip, actor.reward_clip);
}

double overlong_penalty(int64_t length, int64_t max_new_tokens, int64_t overlong_tokens, double factor) {
  const double excess = static_cast<double>(length - (max_new_tokens - overlong_tokens));
  return std::min(0.0, -excess / static_cast<double>(overlong_tokens) * factor);
}

double answer_score(double raw, int64_t length, const ActorConfig& actor, int64_t max_new_tokens) {
  if (actor.overlong_reward_penalty)
    raw += overlong_penalty(length, max_new_tokens, actor.overlong_tokens, actor.overlong_penalty_factor);
  return transform_reward(raw, actor);
}

at::Tensor groups_with_signal(const at::Tensor& scores, int64_t group_size, Communicator* comm) {
  const int64_t rows = scores.size(0);
  if (rows % group_size != 0) throw std::invalid_argument(cat(rows, " answers do not form groups of ", group_size));
  const at::Tensor groups = scores.to(at::kFloat).view({rows / group_size, group_size});
  const at::Tensor signal = (groups.amax(1) != groups.amin(1)).to(at::kFloat);
  at::Tensor any = signal.sum().to(at::kDouble).reshape({1});
  if (comm) comm->all_reduce(any, ReduceOp::Sum);
  if (any.item<double>() == 0) return at::ones({rows}, at::kFloat);
  return signal.unsqueeze(1).expand({rows / group_size, group_size}).reshape({rows});
}

at::Tensor kl_estimate(const at::Tensor& logp, const at::Tensor& ref_logp, const std::string& estimator) {
  at::Tensor log_ratio = logp - ref_logp;
  if (estimator == "k1") return log_ratio;
  if (estimator == "k2") return log_ratio.square() / 2;
  if (estimator == "k3") return (-log_ratio).exp() + log_ratio - 1;
  throw std::invalid_argument(cat("unknown KL estimator '", estimator, "' (k1, k2, k3)"));
}

at::Tensor token_advantages(const at::Tensor& scores, const at::Tensor& kl, const at::Tensor& mask, double kl_ctl,
                            double discount, double gae_lambda) {
  at::Tensor m = mask.to(at::kFloat);
  at::Tensor rewards = kl.defined() ? -kl_ctl * kl.to(at::kFloat) * m : at::zeros_like(m);
  // The score goes on each row's last real token.
  at::Tensor positions = at::arange(m.size(1), m.options()).unsqueeze(0);
  at::Tensor last = (positions * m).amax(1).to(at::kLong);
  rewards = rewards.scatter_add(1, last.unsqueeze(1), (scores.to(at::kFloat) * (m.sum(1) > 0)).unsqueeze(1));
  at::Tensor advantages = at::zeros_like(rewards);
  at::Tensor running = at::zeros({rewards.size(0)}, rewards.options());
  const double decay = discount * gae_lambda;
  // Masked positions carry the return past them unchanged: an episode's environment
  // tokens sit between its turns, and every turn earns the episode's reward (a reset
  // there gave the first turns, the tool call among them, no advantage at all).
  for (int64_t t = rewards.size(1) - 1; t >= 0; --t) {
    const at::Tensor model = m.select(1, t);
    running = at::where(model > 0, rewards.select(1, t) + decay * running, running);
    advantages.select(1, t).copy_(running * model);
  }
  return advantages;
}

namespace {

// Sums of x and x^2 and the token count of each row's group: [rows] each. level
// `batch` sums over every row (and every rank with comm); `group` over group_size rows.
struct LevelSums {
  at::Tensor count, sum, square;
};

LevelSums level_sums(const at::Tensor& x, const at::Tensor& m, const std::string& level, int64_t group_size,
                     Communicator* comm) {
  at::Tensor count = m.sum(1), sum = (x * m).sum(1), square = (x * x * m).sum(1);
  const int64_t rows = x.size(0);
  if (level == "group") {
    if (rows % group_size != 0)
      throw std::invalid_argument(cat(rows, " answers do not form groups of ", group_size));
    auto per_group = [&](const at::Tensor& v) {
      return v.view({rows / group_size, group_size}).sum(1, true).expand({rows / group_size, group_size}).reshape({rows});
    };
    return {per_group(count), per_group(sum), per_group(square)};
  }
  at::Tensor totals = at::stack({count.sum(), sum.sum(), square.sum()}).to(at::kDouble).cpu();
  if (comm) comm->all_reduce(totals, ReduceOp::Sum);
  totals = totals.to(x.options());
  return {totals[0].expand({rows}), totals[1].expand({rows}), totals[2].expand({rows})};
}

}  // namespace

at::Tensor normalize_advantages(const at::Tensor& advantages, const at::Tensor& mask, const NormConfig& norm,
                                int64_t group_size, Communicator* comm) {
  at::Tensor x = advantages.to(at::kFloat), m = mask.to(at::kFloat);
  at::Tensor out = x;
  if (norm.mean_level != "none") {
    LevelSums s = level_sums(x, m, norm.mean_level, group_size, comm);
    at::Tensor count = s.count, sum = s.sum;
    if (norm.mean_leave1out) {  // the others' mean: take the row's own tokens out
      count = count - m.sum(1);
      sum = sum - (x * m).sum(1);
    }
    at::Tensor mean = at::where(count > 0, sum / count.clamp_min(1), at::zeros_like(sum));
    out = out - mean.unsqueeze(1);
  }
  if (norm.std_level != "none") {
    LevelSums s = level_sums(x, m, norm.std_level, group_size, comm);
    at::Tensor mean = s.sum / s.count.clamp_min(1);
    at::Tensor divisor = norm.std_unbiased ? (s.count - 1).clamp_min(1) : s.count.clamp_min(1);
    at::Tensor var = ((s.square - s.count * mean * mean) / divisor).clamp_min(0);
    out = out / (var.sqrt() + norm.eps).unsqueeze(1);
  }
  return out * m;
}

at::Tensor normalize_rewards(const at::Tensor& scores, const NormConfig& norm, Communicator* comm,
                             const at::Tensor& keep) {
  const at::Tensor column = scores.to(at::kFloat).unsqueeze(1);
  const at::Tensor mask = keep.defined() ? keep.to(at::kFloat).unsqueeze(1) : at::ones_like(column);
  if (norm.mean_level == "none" && norm.std_level == "none") return (column * mask).squeeze(1);
  return normalize_advantages(column, mask, norm, norm.group_size, comm).squeeze(1);
}

}  // namespace areal
