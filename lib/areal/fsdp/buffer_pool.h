// Flat buffers kept between uses. Every use of a unit needs a gathered buffer and a
// gradient buffer of the unit's size; allocating them fresh each time costs page faults
// on the host (the kernel clears every fresh page: 16% of a training step in the
// profile of docs/benchmarks.md) and allocator churn on the GPU. The pool hands out
// the smallest free block that fits and keeps every block it ever made, so it holds
// as many blocks as were in use at once (two or three per dtype in the engine).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace areal {

class BufferPool {
 public:
  // A 1-D block of at least `numel` elements of `dtype` on `device` (contents
  // undefined). Give it back with release() when done; narrow it to the size needed.
  at::Tensor acquire(int64_t numel, at::ScalarType dtype, at::Device device);
  void release(at::Tensor block);
  int64_t held_bytes() const;  // all blocks, free or in use

 private:
  std::vector<at::Tensor> free_;
  int64_t held_bytes_ = 0;
};

// A unit's gathered weights in a block of the pool, behind a storage of their own, so
// that views of them saved by an autograd graph stay valid while the block goes back to
// the pool between the forward and the backward (FSDP2 resizes the storage to 0; here
// the storage points at no memory and gets a block again before the backward).
class PooledFlat {
 public:
  PooledFlat() = default;
  // A flat of `numel` elements backed by a block of `pool`.
  PooledFlat(BufferPool& pool, int64_t numel, at::ScalarType dtype, at::Device device);
  // Rebuilds the handle of a flat tensor made by an earlier PooledFlat (now released).
  PooledFlat(BufferPool& pool, at::Tensor flat) : pool_(&pool), flat_(std::move(flat)) {}
  // A tensor that is not the pool's (release and reacquire leave it alone).
  explicit PooledFlat(at::Tensor borrowed) : flat_(std::move(borrowed)) {}

  const at::Tensor& tensor() const { return flat_; }
  bool defined() const { return flat_.defined(); }
  // Gives the block back; the tensor and its views stay, pointing at no memory. Does
  // nothing on a borrowed or undefined one, or one released already.
  void release();
  // Backs the tensor with a block again (contents undefined: gather into it).
  void reacquire();

 private:
  BufferPool* pool_ = nullptr;
  at::Tensor flat_;
  at::Tensor block_;
};

}  // namespace areal
