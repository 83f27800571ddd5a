// Causal attention for a training forward over short sequences in bfloat16 (or float16)
// on the CPU: torch's flash-attention forward in the input's dtype, its backward in
// float32 (an autograd function). Where the CPU has bfloat16 matrix units,
// brgemm_attention.h runs bfloat16 instead.
//
// On the CPU torch's bfloat16 flash-attention backward costs 2-3x its float32 one below
// about 192 keys (docs/training.md, "Precision"), while its bfloat16 forward is faster
// than casting to float32 and back. So the forward runs as torch's bfloat16 SDPA does
// (scores and sums in float32, the probabilities rounded for their product with the
// values), and the backward casts the saved inputs, output and gradient to float32 and
// runs torch's float32 flash backward from the forward's log-sum-exp; the gradients are
// cast back. Grouped-query heads read their shared key/value heads in place (the flash
// ops take them).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace areal {

// softmax(q k^T * scale, causal) v for q [B, heads, T, D], k and v [B, kv_heads, T, D].
at::Tensor mixed_precision_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     std::optional<double> scale);

}  // namespace areal
