// Decoding attention read straight from the blocks of a paged KV cache
// (paged_kv_cache.h): one query token per row against the keys and values of that
// row's blocks, found through its block table.
//
// The pools are [blocks, block_tokens, kv_heads, head_dim]; row b's token l sits in
// block tables[b][l / block_tokens] at offset l % block_tokens. Grouped-query heads
// are read in place: key/value head j serves query heads j * g .. j * g + g - 1
// (g = heads / kv_heads), the layout of Hugging Face's repeat_kv.
#pragma once

#include <ATen/core/Tensor.h>

namespace areal {

// q [B, heads, 1, head_dim]; tables [B, max_blocks] and lengths [B] (int64, on q's
// device; row b attends to its first lengths[b] tokens, lengths[b] >= 1); `longest` is
// the largest length. Scores are q.k * scale (default head_dim ** -0.5), soft-capped as
// tanh(s / softcap) * softcap when softcap > 0 (Gemma 2); with window > 0 a row attends to
// its last `window` tokens only (a sliding layer). Returns [B, heads, 1, head_dim]
// in q's dtype. On the CPU a kernel reads the blocks in place; on other devices the
// rows' keys and values are gathered into one contiguous tensor first (until a device
// kernel exists).
at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& key_pool, const at::Tensor& value_pool,
                                  const at::Tensor& tables, const at::Tensor& lengths, int64_t longest,
                                  double scale = 0, double softcap = 0, int64_t window = 0);

// The gathering form on any device: the reference the kernel is tested against.
at::Tensor gathered_decode_attention(const at::Tensor& q, const at::Tensor& key_pool, const at::Tensor& value_pool,
                                     const at::Tensor& tables, const at::Tensor& lengths, int64_t longest,
                                     double scale = 0, double softcap = 0, int64_t window = 0);

}  // namespace areal
