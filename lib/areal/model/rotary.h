// Rotary position embedding as transformers computes it, with its scalings
// (model_config.h, RopeScaling): default, linear, llama3, yarn, dynamic.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

#include "areal/model/model_config.h"

namespace areal {

// The inverse frequencies [head_dim / 2] (float32) and the factor on cos and sin.
// `seq_len`: the longest position + 1 of the call, for dynamic NTK (which takes
// max(seq_len, max_position_embeddings)); other types ignore it.
at::Tensor rope_inverse_frequencies(const ModelConfig& config, int64_t seq_len = 0);
double rope_attention_scaling(const ModelConfig& config);

// cos and sin for `positions` [B, T]: each [B, T, head_dim], in `dtype`
// (computed in float32, as transformers does). Dynamic NTK scales each token for its
// sequence's length: `sequence_lengths` [B, T] (packed rows), else its row's longest
// position + 1. Per sequence, so a sequence's numbers do not depend on its batch; a KV
// cache keeps the keys of earlier steps as they were rotated, as transformers' does.
std::pair<at::Tensor, at::Tensor> rotary_cos_sin(const at::Tensor& positions, const ModelConfig& config,
                                                 at::ScalarType dtype, const at::Tensor& sequence_lengths = {});

// x [B, heads, T, head_dim] rotated: x * cos + rotate_half(x) * sin (on the CPU one
// fused pass, model/fused_rotary.h).
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace areal
