#include "areal/fsdp/overlap.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace areal {

void accumulate_grad(const at::Tensor& target, at::Tensor grad) {
  at::Tensor& current = target.mutable_grad();
  if (!current.defined()) current = std::move(grad);
  else current.add_(grad);
}

void Overlap::start_gather(const GatherKey& key, PooledFlat flat, const at::Tensor& shard) {
  at::Tensor out = flat.tensor();
  PendingCollective work = comm_.start_all_gather(shard, out);
  gathers_.push_back({key, std::move(flat), std::move(work)});
}

std::optional<PooledFlat> Overlap::take_gather(const GatherKey& key) {
  auto it = std::find_if(gathers_.begin(), gathers_.end(), [&](const Gather& g) { return g.key == key; });
  if (it == gathers_.end()) return std::nullopt;
  it->work.wait();
  PooledFlat flat = std::move(it->flat);
  gathers_.erase(it);
  ++gathers_taken_started_;
  return flat;
}

bool Overlap::gather_started(const GatherKey& key) const {
  return std::any_of(gathers_.begin(), gathers_.end(), [&](const Gather& g) { return g.key == key; });
}

void Overlap::start_reduce(BufferPool& pool, at::Tensor block, const at::Tensor& flat, const at::Tensor& target,
                           size_t keep_pending) {
  while (reduces_.size() >= std::max<size_t>(keep_pending, 1)) finish_oldest_reduce(pool);
  at::Tensor shard_grad = at::empty({flat.numel() / comm_.world_size()}, flat.options());
  PendingCollective work = comm_.start_reduce_scatter(flat, shard_grad, ReduceOp::Avg);
  reduces_.push_back({std::move(block), shard_grad, target, std::move(work)});
}

void Overlap::finish_oldest_reduce(BufferPool& pool) {
  Reduce r = std::move(reduces_.front());
  reduces_.pop_front();
  r.work.wait();
  pool.release(std::move(r.block));
  accumulate_grad(r.target, r.shard_grad.to(at::kFloat));
}

void Overlap::finish(BufferPool& pool) {
  while (!reduces_.empty()) finish_oldest_reduce(pool);
  while (!gathers_.empty()) {
    gathers_.front().work.wait();
    gathers_.front().flat.release();
    gathers_.pop_front();
  }
}

}  // namespace areal
