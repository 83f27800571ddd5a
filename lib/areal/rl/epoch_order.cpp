#include "areal/rl/epoch_order.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace areal {

std::vector<size_t> epoch_order(size_t rows, int64_t seed, int64_t epoch, bool shuffle) {
  std::vector<size_t> order(rows);
  std::iota(order.begin(), order.end(), size_t{0});
  if (shuffle) {
    std::mt19937_64 rng(static_cast<uint64_t>(seed) * 1000003 + static_cast<uint64_t>(epoch));
    std::shuffle(order.begin(), order.end(), rng);
  }
  return order;
}

int64_t batches_per_epoch(size_t rows, int64_t batch_size, bool drop_last) {
  const int64_t n = static_cast<int64_t>(rows);
  return drop_last ? n / batch_size : (n + batch_size - 1) / batch_size;
}

}  // namespace areal
