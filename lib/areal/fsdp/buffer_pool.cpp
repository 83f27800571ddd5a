#include "areal/fsdp/buffer_pool.h"

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>

#include <stdexcept>

namespace areal {

at::Tensor BufferPool::acquire(int64_t numel, at::ScalarType dtype, at::Device device) {
  size_t best = free_.size();
  for (size_t i = 0; i < free_.size(); ++i) {
    const at::Tensor& b = free_[i];
    if (b.scalar_type() != dtype || b.device() != device || b.numel() < numel) continue;
    if (best == free_.size() || b.numel() < free_[best].numel()) best = i;
  }
  if (best == free_.size()) {
    at::Tensor block = at::empty({numel}, at::TensorOptions(device).dtype(dtype));
    held_bytes_ += block.nbytes();
    return block;
  }
  at::Tensor block = std::move(free_[best]);
  free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
  return block;
}

void BufferPool::release(at::Tensor block) {
  if (block.defined()) free_.push_back(std::move(block));
}

int64_t BufferPool::held_bytes() const { return held_bytes_; }

namespace {

// Points `flat`'s storage at `block`'s memory without owning it (or at nothing).
void point_storage_at(const at::Tensor& flat, const at::Tensor& block) {
  c10::StorageImpl* storage = flat.storage().unsafeGetStorageImpl();
  if (!block.defined()) {
    storage->set_data_ptr_noswap(at::DataPtr(nullptr, flat.device()));
    storage->set_nbytes(0);
    return;
  }
  storage->set_data_ptr_noswap(at::DataPtr(block.data_ptr(), block.device()));
  storage->set_nbytes(flat.nbytes());
}

}  // namespace

PooledFlat::PooledFlat(BufferPool& pool, int64_t numel, at::ScalarType dtype, at::Device device) : pool_(&pool) {
  block_ = pool.acquire(numel, dtype, device);
  // from_blob without a deleter: a storage of its own that does not own the block.
  flat_ = at::from_blob(block_.data_ptr(), {numel}, block_.options());
}

void PooledFlat::release() {
  if (!block_.defined()) return;
  point_storage_at(flat_, at::Tensor());
  pool_->release(std::move(block_));
  block_ = at::Tensor();
}

void PooledFlat::reacquire() {
  if (block_.defined() || pool_ == nullptr) return;
  block_ = pool_->acquire(flat_.numel(), flat_.scalar_type(), flat_.device());
  point_storage_at(flat_, block_);
}

}  // namespace areal
