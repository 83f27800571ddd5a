#include "areal/optim/adamw.h"

#include <ATen/ATen.h>

#include <cmath>

namespace areal {

ShardedAdamW::ShardedAdamW(std::vector<at::Tensor> shards, const OptimizerConfig& config, Communicator& comm)
    : shards_(std::move(shards)), config_(config), comm_(comm) {
  for (const auto& s : shards_) {
    exp_avg_.push_back(at::zeros_like(s, at::TensorOptions().dtype(at::kFloat)));
    exp_avg_sq_.push_back(at::zeros_like(s, at::TensorOptions().dtype(at::kFloat)));
  }
}

StepResult ShardedAdamW::step(double lr) {
  StepResult result;
  at::Tensor squares = at::zeros({1}, at::kDouble);
  for (const auto& s : shards_)
    if (s.grad().defined()) squares += s.grad().to(at::kDouble).pow(2).sum().cpu();
  comm_.all_reduce(squares, ReduceOp::Sum);
  result.grad_norm = std::sqrt(squares.item<double>());
  if (!std::isfinite(result.grad_norm)) {
    result.skipped = true;  // every rank sees the same norm, so every rank skips
    return result;
  }
  // As torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when above.
  const double clip = config_.gradient_clipping;
  const double scale = clip > 0 ? std::min(1.0, clip / (result.grad_norm + 1e-6)) : 1.0;

  ++step_;
  const double bias1 = 1.0 - std::pow(config_.beta1, static_cast<double>(step_));
  const double bias2 = 1.0 - std::pow(config_.beta2, static_cast<double>(step_));
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < shards_.size(); ++i) {
    at::Tensor& p = shards_[i];
    if (!p.grad().defined()) continue;
    at::Tensor g = scale < 1.0 ? p.grad() * scale : p.grad();
    p.mul_(1.0 - lr * config_.weight_decay);
    exp_avg_[i].mul_(config_.beta1).add_(g, 1.0 - config_.beta1);
    exp_avg_sq_[i].mul_(config_.beta2).addcmul_(g, g, 1.0 - config_.beta2);
    at::Tensor denom = (exp_avg_sq_[i].sqrt() / std::sqrt(bias2)).add_(config_.eps);
    p.addcdiv_(exp_avg_[i], denom, -lr / bias1);
  }
  return result;
}

void ShardedAdamW::zero_grad() {
  for (auto& s : shards_)
    if (s.grad().defined()) s.mutable_grad().zero_();
}

}  // namespace areal
