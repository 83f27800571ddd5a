#include "areal/rl/batch_refill.h"

#include <algorithm>
#include <random>

namespace areal {

std::vector<size_t> refill_prompts(int64_t seed, int64_t step, int64_t round, int64_t count, size_t dataset_size,
                                   const std::vector<size_t>& drawn) {
  std::seed_seq seq{static_cast<uint64_t>(seed), static_cast<uint64_t>(step), static_cast<uint64_t>(round),
                    uint64_t{0x5eed0f11}};
  std::mt19937_64 rng(seq);
  std::vector<bool> used(dataset_size, false);
  for (size_t i : drawn)
    if (i < dataset_size) used[i] = true;
  std::vector<size_t> fresh, again;
  for (size_t i = 0; i < dataset_size; ++i) (used[i] ? again : fresh).push_back(i);
  std::shuffle(fresh.begin(), fresh.end(), rng);
  std::shuffle(again.begin(), again.end(), rng);
  std::vector<size_t> order = std::move(fresh);
  order.insert(order.end(), again.begin(), again.end());
  std::vector<size_t> prompts;
  for (int64_t i = 0; i < count && !order.empty(); ++i) prompts.push_back(order[static_cast<size_t>(i) % order.size()]);
  return prompts;
}

std::vector<bool> group_signals(const std::vector<double>& scores, int64_t group_size) {
  std::vector<bool> signal;
  for (size_t first = 0; first + static_cast<size_t>(group_size) <= scores.size(); first += group_size) {
    const auto [low, high] = std::minmax_element(scores.begin() + first, scores.begin() + first + group_size);
    signal.push_back(*low != *high);
  }
  return signal;
}

int64_t groups_taken(const std::vector<int64_t>& signal_counts, int rank, int64_t still_needed) {
  int64_t before = 0;
  for (int r = 0; r < rank; ++r) before += signal_counts[r];
  return std::clamp<int64_t>(still_needed - before, 0, signal_counts[rank]);
}

}  // namespace areal
