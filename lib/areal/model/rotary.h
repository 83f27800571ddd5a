// Rotary position embedding as in transformers' default rope (no scaling).
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

namespace areal {

// cos and sin for `positions` [B, T]: each [B, T, head_dim], in `dtype`
// (computed in float32, as transformers does).
std::pair<at::Tensor, at::Tensor> rotary_cos_sin(const at::Tensor& positions, int64_t head_dim, double theta,
                                                 at::ScalarType dtype);

// x [B, heads, T, head_dim] rotated: x * cos + rotate_half(x) * sin.
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace areal
