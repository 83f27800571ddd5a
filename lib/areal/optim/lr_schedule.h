// Learning-rate schedules: linear warm-up, then constant, linear or cosine decay to
// min_lr_ratio x lr at the last step (the shapes of transformers' schedulers).
#pragma once

#include <cstdint>

#include "areal/config/config.h"

namespace areal {

// The learning rate of step `step` (0-based) of `total_steps`.
double learning_rate(const OptimizerConfig& optimizer, int64_t step, int64_t total_steps);

}  // namespace areal
