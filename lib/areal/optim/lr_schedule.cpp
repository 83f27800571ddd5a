#include "areal/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace areal {

double learning_rate(const OptimizerConfig& o, int64_t step, int64_t total_steps) {
  const int64_t warmup = static_cast<int64_t>(o.warmup_steps_proportion * static_cast<double>(total_steps));
  if (step < warmup) return o.lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (o.lr_scheduler_type == "constant") return o.lr;
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - 1 - warmup));
  const double progress = std::clamp(static_cast<double>(step - warmup) / span, 0.0, 1.0);
  const double floor = o.min_lr_ratio * o.lr;
  if (o.lr_scheduler_type == "linear") return floor + (o.lr - floor) * (1.0 - progress);
  return floor + (o.lr - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));  // cosine
}

}  // namespace areal
