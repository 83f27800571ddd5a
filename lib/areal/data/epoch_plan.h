// The batches of one epoch, shared by SFT and RL: the dataset's rows in a seeded order
// (shuffled with (seed, epoch), or in file order) cut into batches of batch_size rows.
// The same on every rank (same engine, same seed), so ranks agree on every batch.
//
// The last, partial batch: dropped with drop_last; otherwise kept, cut down to a
// multiple of the world size so that every rank gets the same number of rows (the
// few rows cut, fewer than the world size, are counted in `left_out`). Every epoch has
// the same number of batches, so "steps per epoch" is exact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace areal {

struct EpochSpec {
  size_t rows = 0;         // usable rows of the dataset
  int64_t batch_size = 1;  // over all ranks; a multiple of world_size
  bool drop_last = true;
  bool shuffle = true;
  int64_t seed = 1;
  int world_size = 1;
};

struct EpochPlan {
  std::vector<std::vector<size_t>> batches;  // row indices, batch by batch
  size_t left_out = 0;                       // rows of the epoch in no batch
};

EpochPlan plan_epoch(const EpochSpec& spec, int64_t epoch);

// The batches every epoch has (a function of the shape only, not of the order).
int64_t batches_per_epoch(const EpochSpec& spec);

// The epochs and steps of a run: the shape of every epoch and how many steps in all.
struct TrainingSchedule {
  EpochSpec epochs;
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;  // over all epochs, capped by total_train_steps
};

}  // namespace areal
