#include "areal/rl/ppo_loss.h"

#include <ATen/ATen.h>

namespace areal {

PpoTokenLoss ppo_token_loss(const at::Tensor& logp, const at::Tensor& old_logp, const at::Tensor& advantages,
                            double eps_clip, double eps_clip_higher, double c_clip) {
  const double upper = eps_clip_higher > 0 ? eps_clip_higher : eps_clip;
  at::Tensor ratio = (logp - old_logp).exp();
  at::Tensor plain = -advantages * ratio;
  at::Tensor clipped = -advantages * ratio.clamp(1 - eps_clip, 1 + upper);
  at::Tensor loss = at::maximum(plain, clipped);
  at::Tensor took_clip = clipped > plain;
  at::Tensor dual = at::zeros_like(took_clip);
  if (c_clip > 1) {
    at::Tensor bound = -advantages * c_clip;
    dual = (advantages < 0) & (loss > bound);
    loss = at::where(dual, bound, loss);
  }
  return {loss, took_clip, dual, ratio.detach()};
}

at::Tensor sequence_level_logp(const at::Tensor& logp, const at::Tensor& base, const at::Tensor& mask,
                               const at::Tensor& sequence) {
  const at::Tensor ids = sequence.reshape({-1}).to(at::kLong);
  const int64_t n = ids.numel() > 0 ? ids.max().item<int64_t>() + 1 : 0;
  const at::Tensor m = mask.to(logp.scalar_type()).reshape({-1});
  const at::Tensor log_ratio = (logp - base).reshape({-1}) * m;
  const at::Tensor sums = at::zeros({n}, log_ratio.options()).index_add(0, ids, log_ratio);
  const at::Tensor counts = at::zeros({n}, m.options()).index_add(0, ids, m).clamp_min(1);
  return base + (sums / counts).index_select(0, ids).view(logp.sizes());
}

at::Tensor loss_token_weights(const at::Tensor& mask, const std::string& mode, int64_t max_new_tokens) {
  const at::Tensor m = mask.to(at::kFloat);
  if (mode == "seq-mean-token-mean") return m / m.sum(1, /*keepdim=*/true).clamp_min(1);
  if (mode == "seq-mean-token-sum-norm") return m / static_cast<double>(max_new_tokens);
  return m;  // token-mean, seq-mean-token-sum
}

double loss_units(const at::Tensor& mask, const std::string& mode) {
  if (mode == "token-mean") return mask.to(at::kDouble).sum().item<double>();
  return (mask.sum(1) > 0).sum().item<double>();
}

TokenLogprobs token_logprobs(const at::Tensor& logits, const at::Tensor& targets, double temperature) {
  at::Tensor logp_all = (logits.to(at::kFloat) / temperature).log_softmax(-1);
  at::Tensor logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1);
  at::Tensor entropy = -(logp_all.detach().exp() * logp_all.detach()).sum(-1);
  return {logp, entropy};
}

}  // namespace areal
