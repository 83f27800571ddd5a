// Causal attention over short sequences in bfloat16 on the CPU's bfloat16 matrix units
// (AMX, through torch's batch-reduce GEMM), forward and backward (an autograd function).
//
// torch's flash attention spends a short training row's time in small per-head GEMM
// calls. Here each (row, key/value head) is one item: its group of query heads stacked
// into one matrix, so the scores of the whole group are one product with the shared keys
// (at::native::cpublas::brgemm: bfloat16 in, float32 out); softmax and the score
// gradients in float32. The probabilities and score gradients enter their products split
// in two bfloat16 parts (x = hi + lo, hi = x rounded), so those products keep float32's
// precision: nothing is rounded to bfloat16 but the outputs and the gradients returned.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace areal {

// Whether brgemm_attention takes these: CPU bfloat16 q [B, heads, T, D], k and v
// [B, kv_heads, T, D] (the same T), heads a multiple of kv_heads, D a multiple of 16,
// and a CPU whose brgemm packs bfloat16 (AMX or AVX-512 BF16).
bool brgemm_attention_runs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// softmax(q k^T * scale, causal) v (scale default D^-1/2), [B, heads, T, D] in bfloat16.
at::Tensor brgemm_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            std::optional<double> scale);

}  // namespace areal
