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
  // Each shard's norm in float32 (a cascaded sum, no double copy of the gradient), the
  // squares summed in double: what clip_grad_norm_ computes.
  std::vector<at::Tensor> norms;
  for (const auto& s : shards_)
    if (s.grad().defined()) norms.push_back(at::linalg_vector_norm(s.grad(), 2).to(at::kDouble));
  at::Tensor squares = norms.empty() ? at::zeros({1}, at::kDouble) : at::stack(norms).pow(2).sum().reshape({1}).cpu();
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
  // PyTorch's fused AdamW kernel: one pass over each shard (weight decay, both moments,
  // bias correction, update) instead of ten, and no temporaries. Clipping goes in as
  // its grad_scale, by which the kernel divides each gradient.
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (!shards_[i].grad().defined()) continue;
    params.push_back(shards_[i]);
    grads.push_back(shards_[i].grad());
    exp_avgs.push_back(exp_avg_[i]);
    exp_avg_sqs.push_back(exp_avg_sq_[i]);
    steps.push_back(at::full({}, static_cast<double>(step_), shards_[i].options().dtype(at::kFloat)));
  }
  if (params.empty()) return result;
  std::optional<at::Tensor> grad_scale;
  if (scale < 1.0) grad_scale = at::full({}, 1.0 / scale, params[0].options().dtype(at::kFloat));
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, config_.beta1,
                    config_.beta2, config_.weight_decay, config_.eps, /*amsgrad=*/false, /*maximize=*/false,
                    grad_scale);
  return result;
}

void ShardedAdamW::zero_grad() {
  for (auto& s : shards_) s.mutable_grad() = at::Tensor();
}

}  // namespace areal
