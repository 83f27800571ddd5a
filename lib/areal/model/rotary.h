// Rotary position embedding as transformers computes it, with its scalings
// (model_config.h, RopeScaling): default, linear, llama3, yarn.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

#include "areal/model/model_config.h"

namespace areal {

// The inverse frequencies [head_dim / 2] (float32) and the factor on cos and sin.
at::Tensor rope_inverse_frequencies(const ModelConfig& config);
double rope_attention_scaling(const ModelConfig& config);

// cos and sin for `positions` [B, T]: each [B, T, head_dim], in `dtype`
// (computed in float32, as transformers does).
std::pair<at::Tensor, at::Tensor> rotary_cos_sin(const at::Tensor& positions, const ModelConfig& config,
                                                 at::ScalarType dtype);

// x [B, heads, T, head_dim] rotated: x * cos + rotate_half(x) * sin.
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace areal
