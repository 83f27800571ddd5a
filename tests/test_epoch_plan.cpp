// The epoch plan that SFT and RL share: every row at most once per epoch, the partial
// last batch kept or dropped as asked, every batch a multiple of the world size.
#include <catch2/catch.hpp>

#include <set>

#include "areal/data/epoch_plan.h"

using namespace areal;

namespace {

std::vector<size_t> sizes(const EpochPlan& plan) {
  std::vector<size_t> out;
  for (const auto& b : plan.batches) out.push_back(b.size());
  return out;
}

}  // namespace

TEST_CASE("epoch plan: the partial last batch is kept or dropped as asked", "[data]") {
  EpochSpec spec{8, 6, /*drop_last=*/false, /*shuffle=*/true, /*seed=*/3, /*world_size=*/2};
  EpochPlan kept = plan_epoch(spec, 0);
  CHECK(sizes(kept) == std::vector<size_t>{6, 2});
  CHECK(kept.left_out == 0);
  CHECK(batches_per_epoch(spec) == 2);
  std::set<size_t> seen;
  for (const auto& b : kept.batches) seen.insert(b.begin(), b.end());
  CHECK(seen.size() == 8);  // every row once

  spec.drop_last = true;
  EpochPlan dropped = plan_epoch(spec, 0);
  CHECK(sizes(dropped) == std::vector<size_t>{6});
  CHECK(dropped.left_out == 2);
  CHECK(dropped.batches[0] == kept.batches[0]);  // the same order either way

  spec = {8, 10, false, true, 3, 2};  // a batch larger than the data: one batch of all rows
  CHECK(sizes(plan_epoch(spec, 0)) == std::vector<size_t>{8});
  spec.drop_last = true;
  CHECK(plan_epoch(spec, 0).batches.empty());
  CHECK(batches_per_epoch(spec) == 0);
}

TEST_CASE("epoch plan: the last batch is cut to a multiple of the world size", "[data]") {
  EpochSpec spec{11, 6, false, false, 1, 3};  // 6 + 5 rows; 5 -> 3 for three ranks
  EpochPlan plan = plan_epoch(spec, 0);
  CHECK(sizes(plan) == std::vector<size_t>{6, 3});
  CHECK(plan.left_out == 2);
  CHECK(plan.batches[1] == std::vector<size_t>{6, 7, 8});  // file order without shuffle
  spec.rows = 8;  // 6 + 2 rows: 2 < 3 ranks, no last batch
  CHECK(sizes(plan_epoch(spec, 0)) == std::vector<size_t>{6});
}

TEST_CASE("epoch plan: each epoch has its own seeded order, the same for the same seed", "[data]") {
  EpochSpec spec{100, 10, true, true, 7, 2};
  CHECK(plan_epoch(spec, 0).batches == plan_epoch(spec, 0).batches);
  CHECK(plan_epoch(spec, 0).batches != plan_epoch(spec, 1).batches);
  spec.seed = 8;
  EpochSpec other = spec;
  other.seed = 7;
  CHECK(plan_epoch(spec, 0).batches != plan_epoch(other, 0).batches);
}
