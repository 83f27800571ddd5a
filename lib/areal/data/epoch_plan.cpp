#include "areal/data/epoch_plan.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace areal {
namespace {

// The sizes of an epoch's batches, in order.
std::vector<size_t> batch_sizes(const EpochSpec& spec) {
  const size_t batch = static_cast<size_t>(spec.batch_size), world = static_cast<size_t>(spec.world_size);
  std::vector<size_t> sizes(spec.rows / batch, batch);
  const size_t rest = spec.rows % batch / world * world;  // whole rows for every rank
  if (!spec.drop_last && rest > 0) sizes.push_back(rest);
  return sizes;
}

}  // namespace

EpochPlan plan_epoch(const EpochSpec& spec, int64_t epoch) {
  std::vector<size_t> order(spec.rows);
  std::iota(order.begin(), order.end(), size_t{0});
  if (spec.shuffle) {
    std::mt19937_64 rng(static_cast<uint64_t>(spec.seed) * 1000003 + static_cast<uint64_t>(epoch));
    std::shuffle(order.begin(), order.end(), rng);
  }
  EpochPlan plan;
  size_t next = 0;
  for (size_t size : batch_sizes(spec)) {
    plan.batches.emplace_back(order.begin() + next, order.begin() + next + size);
    next += size;
  }
  plan.left_out = spec.rows - next;
  return plan;
}

int64_t batches_per_epoch(const EpochSpec& spec) { return static_cast<int64_t>(batch_sizes(spec).size()); }

}  // namespace areal
