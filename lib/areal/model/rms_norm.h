// RMSNorm on the CPU in one pass over each row, forward and backward (an autograd function).
//
// The same arithmetic as transformers' eager RMSNorm, which in torch is seven elementwise
// ops forward and more backward, each a pass over the activations (a tenth of a bfloat16
// GRPO step's training on 2 cores: docs/benchmarks.md). In float32 per row:
//   r = 1 / sqrt(mean(x^2) + eps)
//   Llama, Qwen, Mistral:  y = w * round(x * r)     (round: to x's dtype; the product in it)
//   Gemma:                 y = round((x * r) * (1 + w))
// The backward gives x's and w's gradients as torch's autograd of that graph does (up to
// the order of the sums).
#pragma once

#include <ATen/core/Tensor.h>

namespace areal {

// Whether fused_rms_norm takes these: CPU, float32 or bfloat16, weight of x's dtype and
// last dimension. Otherwise the caller runs the eager ops (CUDA, float16).
bool fuses_rms_norm(const at::Tensor& x, const at::Tensor& weight);

// The norm over x's last dimension; `gemma` selects Gemma's (1 + w) scale in float32.
at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, bool gemma);

}  // namespace areal
