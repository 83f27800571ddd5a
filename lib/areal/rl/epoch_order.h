// The order of a dataset's rows in one epoch: shuffled with (seed, epoch), or in file
// order. The same on every rank (same engine, same seed), so ranks agree on batches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace areal {

std::vector<size_t> epoch_order(size_t rows, int64_t seed, int64_t epoch, bool shuffle);

// Batches per epoch: full batches only with drop_last, else also the last partial one.
int64_t batches_per_epoch(size_t rows, int64_t batch_size, bool drop_last);

}  // namespace areal
