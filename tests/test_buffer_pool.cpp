// The engine's buffer pool: blocks are reused, and a pooled flat's views survive giving
// the block back and getting one again (what the keep-activations engine relies on).
#include <ATen/ATen.h>
#include "catch_with_torch.h"

#include "areal/fsdp/buffer_pool.h"

using namespace areal;

TEST_CASE("buffer pool: the smallest free block that fits is reused, nothing else is made", "[engine]") {
  BufferPool pool;
  const at::Device cpu(at::kCPU);
  at::Tensor big = pool.acquire(1000, at::kFloat, cpu);
  at::Tensor small = pool.acquire(100, at::kFloat, cpu);
  CHECK(big.numel() >= 1000);
  CHECK(small.numel() >= 100);
  const int64_t held = pool.held_bytes();
  CHECK(held == (1000 + 100) * 4);
  void* small_memory = small.data_ptr();
  void* big_memory = big.data_ptr();
  pool.release(big);
  pool.release(small);
  at::Tensor again = pool.acquire(50, at::kFloat, cpu);  // both fit: the smaller one
  CHECK(again.data_ptr() == small_memory);
  at::Tensor other_dtype = pool.acquire(50, at::kBFloat16, cpu);  // no bfloat16 block yet
  CHECK(pool.held_bytes() == held + 50 * 2);
  at::Tensor too_big = pool.acquire(2000, at::kFloat, cpu);  // the free one is too small
  CHECK(too_big.data_ptr() != big_memory);
  pool.release(again);
  pool.release(other_dtype);
  pool.release(too_big);
  for (int i = 0; i < 10; ++i) pool.release(pool.acquire(900, at::kFloat, cpu));
  CHECK(pool.held_bytes() == held + 50 * 2 + 2000 * 4);
}

TEST_CASE("pooled flat: views stay valid across release and reacquire", "[engine]") {
  BufferPool pool;
  const at::Device cpu(at::kCPU);
  PooledFlat flat(pool, 12, at::kFloat, cpu);
  flat.tensor().copy_(at::arange(12, at::kFloat));
  at::Tensor view = flat.tensor().narrow(0, 4, 6).view({2, 3}).detach();  // as a saved graph holds it
  CHECK(view.sum().item<float>() == 4 + 5 + 6 + 7 + 8 + 9);

  flat.release();
  CHECK(flat.tensor().storage().nbytes() == 0);
  // The block is free: another user gets it and writes over it.
  at::Tensor taken = pool.acquire(12, at::kFloat, cpu);
  taken.fill_(-1);

  flat.reacquire();  // a different block now (the old one is taken)
  CHECK(flat.tensor().storage().nbytes() == 12 * 4);
  CHECK(flat.tensor().data_ptr() != taken.data_ptr());
  flat.tensor().copy_(at::arange(12, at::kFloat) * 10);  // "gathered again"
  CHECK(view.sum().item<float>() == 10 * (4 + 5 + 6 + 7 + 8 + 9));
  CHECK(view.data_ptr() == static_cast<float*>(flat.tensor().data_ptr()) + 4);
  flat.release();
  pool.release(taken);
}
