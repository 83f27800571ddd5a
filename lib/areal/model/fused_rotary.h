// The rotary embedding on the CPU in one pass over each head's row, forward and backward
// (an autograd function), with the roundings of transformers' eager ops in the input
// dtype: round(round(x * cos) + round(rotate_half(x) * sin)). The eager form is five ops
// forward (two narrows' copy into a cat, a negation, two products, a sum) and more
// backward, for the queries and the keys of every layer.
#pragma once

#include <ATen/core/Tensor.h>

namespace areal {

// Whether fused_rotary takes these: CPU, float32 or bfloat16; x [B, heads, T, D] with its
// last dimension contiguous; cos and sin [B or 1, T, D] of x's dtype.
bool fuses_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// x * cos + rotate_half(x) * sin, cos and sin broadcast over the heads (and the batch).
at::Tensor fused_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace areal
