// DAPO's batch refill (actor.dynamic_sampling with dynamic_bs: false, AReaL's default):
// a group whose answers all scored the same carries no signal; instead of training on a
// smaller batch, the step generates more groups until train_dataset.batch_size groups
// of all ranks carry a signal. AReaL pulls the extra prompts from its dataloader; here
// each refill round draws them from the training set with a generator seeded by the
// run's seed, the step and the round, so that an epoch keeps its steps and a resumed
// run draws the same prompts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace areal {

// Refill rounds a step may run before it trains on the groups it has (with a warning).
constexpr int64_t kMaxRefillRounds = 8;

// The prompts (indices into a training set of `dataset_size`) of refill round `round`
// (from 1) of `step`: `count` of them, the same on every rank, drawn without
// replacement: first from the prompts the step has not used (`drawn`: its batch and
// earlier rounds), then, when those run out, from the used ones; a round repeats a
// prompt only when `count` exceeds the training set. (Two draws of one prompt in a
// round would give identical answers: each answer's generator is seeded by the step,
// the prompt and its slot.)
std::vector<size_t> refill_prompts(int64_t seed, int64_t step, int64_t round, int64_t count, size_t dataset_size,
                                   const std::vector<size_t>& drawn);

// 1 for each group (`group_size` consecutive scores) whose scores differ.
std::vector<bool> group_signals(const std::vector<double>& scores, int64_t group_size);

// How many of rank `rank`'s groups with a signal in this round join the batch: ranks
// take theirs in rank order, until `still_needed` groups are taken. `signal_counts`:
// every rank's groups with a signal this round.
int64_t groups_taken(const std::vector<int64_t>& signal_counts, int rank, int64_t still_needed);

}  // namespace areal
