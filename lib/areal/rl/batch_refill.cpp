#include "areal/rl/batch_refill.h"

#include <algorithm>
#include <random>

namespace areal {

std::vector<size_t> refill_prompts(int64_t seed, int64_t step, int64_t round, int64_t count, size_t dataset_size) {
  std::seed_seq seq{static_cast<uint64_t>(seed), static_cast<uint64_t>(step), static_cast<uint64_t>(round),
                    uint64_t{0x5eed0f11}};
  std::mt19937_64 rng(seq);
  std::uniform_int_distribution<size_t> pick(0, dataset_size - 1);
  std::vector<size_t> prompts;
  for (int64_t i = 0; i < count; ++i) prompts.push_back(pick(rng));
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
