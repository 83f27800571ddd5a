// Learning-rate schedules, against values worked out by hand from their definitions.
#include <catch2/catch.hpp>

#include <cmath>

#include "areal/optim/lr_schedule.h"

using areal::learning_rate;


TEST_CASE("lr schedules: warm-up, then constant, linear or cosine decay to the floor", "[optim]") {
  areal::OptimizerConfig o;
  o.lr = 1.0;
  o.warmup_steps_proportion = 0.1;  // 10 of 100 steps
  o.min_lr_ratio = 0.1;
  o.lr_scheduler_type = "constant";
  CHECK(learning_rate(o, 0, 100) == Approx(0.1));   // step 1 of 10 warm-up steps
  CHECK(learning_rate(o, 9, 100) == Approx(1.0));
  CHECK(learning_rate(o, 50, 100) == Approx(1.0));
  o.lr_scheduler_type = "linear";
  CHECK(learning_rate(o, 10, 100) == Approx(1.0));  // first step after warm-up: the peak
  CHECK(learning_rate(o, 99, 100) == Approx(0.1));  // last step: the floor
  CHECK(learning_rate(o, 10 + 44, 100) == Approx(0.55).margin(0.01));
  o.lr_scheduler_type = "cosine";
  CHECK(learning_rate(o, 10, 100) == Approx(1.0));
  CHECK(learning_rate(o, 99, 100) == Approx(0.1));
  // Halfway through the decay: floor + (peak - floor) / 2.
  o.warmup_steps_proportion = 0;
  CHECK(learning_rate(o, 50, 101) == Approx(0.55));
  CHECK(learning_rate(o, 25, 101) == Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.25))));
}
