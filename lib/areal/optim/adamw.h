// AdamW on the shards: float32 moments live beside each rank's shard only, so the
// optimizer's memory is divided by the world size like the weights. Global gradient
// clipping sums the squared norms of all ranks' shards.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "areal/config/config.h"
#include "areal/dist/communicator.h"

namespace areal {

struct StepResult {
  double grad_norm = 0;  // before clipping, over the whole model
  bool skipped = false;  // the norm was not finite: no update was made
};

class ShardedAdamW {
 public:
  // `shards`: float32 leaves whose .grad the engine fills (padding included: its
  // gradient is zero and it stays zero).
  ShardedAdamW(std::vector<at::Tensor> shards, const OptimizerConfig& config, Communicator& comm);

  // Clips (optimizer.gradient_clipping > 0) and updates every shard with `lr`, the
  // same arithmetic as torch.optim.AdamW. Collective (the norm is global).
  StepResult step(double lr);
  // Leaves the shards without gradients, as torch's zero_grad() (set_to_none): a shard
  // that no backward reaches before the next step is left out of it, as torch.optim does.
  void zero_grad();
  int64_t steps_taken() const { return step_; }

  // The moments (one per shard, same shape) and the step count, for recover checkpoints.
  const std::vector<at::Tensor>& exp_avg() const { return exp_avg_; }
  const std::vector<at::Tensor>& exp_avg_sq() const { return exp_avg_sq_; }
  void set_steps_taken(int64_t steps) { step_ = steps; }

 private:
  std::vector<at::Tensor> shards_, exp_avg_, exp_avg_sq_;
  OptimizerConfig config_;
  Communicator& comm_;
  int64_t step_ = 0;
};

}  // namespace areal
