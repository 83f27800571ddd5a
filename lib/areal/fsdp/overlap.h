// What runs beside the compute (fsdp.prefetch_depth, DESIGN.md "Train"): the
// all-gathers of the next units, started while the current unit computes, forward and
// backward; and the gradient reduce-scatters of the units just back-propagated, left
// in flight while the next unit's backward computes and finished later (at most
// `depth` of them at once, all of them when the backward pass ends).
//
// The communication itself is Communicator::start_all_gather / start_reduce_scatter:
// a communication thread over MPI on CPU ranks, the NCCL stream on GPUs. Every rank
// starts the same collectives in the same order, since every rank runs the same units
// in the same order.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <optional>

#include "areal/dist/communicator.h"
#include "areal/fsdp/buffer_pool.h"

namespace areal {

// Which gather: use `use` of forward `forward`, its base unit or its adapters, for the
// forward or for the backward.
struct GatherKey {
  int64_t forward = 0;
  int64_t use = 0;
  bool adapter = false;
  bool backward = false;
  bool operator==(const GatherKey&) const = default;
};

class Overlap {
 public:
  explicit Overlap(Communicator& comm) : comm_(comm) {}

  // Starts all-gathering `shard` (already in the flat's dtype) into `flat`.
  void start_gather(const GatherKey& key, PooledFlat flat, const at::Tensor& shard);
  // The flat started under `key`, its gather finished; nothing when none was started.
  std::optional<PooledFlat> take_gather(const GatherKey& key);
  bool gather_started(const GatherKey& key) const;
  // How many take_gather calls found their gather started (tests, stats).
  int64_t gathers_taken_started() const { return gathers_taken_started_; }

  // Starts reduce-scattering `flat` (a narrowed `block` of `pool`, averaged over ranks);
  // once finished, the result goes into `target`'s gradient (float32, added to what is
  // there) and the block back to the pool. Finishes the oldest pending ones first so
  // that at most `keep_pending` stay in flight.
  void start_reduce(BufferPool& pool, at::Tensor block, const at::Tensor& flat, const at::Tensor& target,
                    size_t keep_pending);
  // Waits for every pending reduction and writes its gradient; gives back the blocks
  // of gathers started but never taken (the end of a backward pass).
  void finish(BufferPool& pool);

 private:
  struct Gather {
    GatherKey key;
    PooledFlat flat;
    PendingCollective work;
  };
  struct Reduce {
    at::Tensor block, shard_grad, target;
    PendingCollective work;
  };
  void finish_oldest_reduce(BufferPool& pool);

  Communicator& comm_;
  std::deque<Gather> gathers_;
  std::deque<Reduce> reduces_;
  int64_t gathers_taken_started_ = 0;
};

// Adds `grad` (float32, the shard's size) into `target`'s gradient, as autograd's
// accumulation would: the first one becomes the gradient, later ones are added.
void accumulate_grad(const at::Tensor& target, at::Tensor grad);

}  // namespace areal
