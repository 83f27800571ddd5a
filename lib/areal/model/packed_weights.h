// Weights packed once for the CPU's matrix products (oneDNN's blocked layout).
//
// at::linear hands MKL a plain [out, in] weight, and at the few rows of a decode step
// MKL repacks the whole weight into its kernel's panels on every call (15 % of the
// products' time at 32 rows of the 74 M bench model, a third at 8). A weight packed once (and
// again after each weight update) is read by oneDNN's kernels as it is, for any number
// of rows. Generation packs its slices (rollout_model.h); training keeps plain weights,
// whose gradients and optimizer need them.
#pragma once

#include <ATen/core/Tensor.h>

namespace areal {

// Whether weights of `dtype` on `device` are packed: the CPU, float32 or bfloat16, and a
// build of torch with oneDNN (the rollout's memory check asks before any weight exists).
bool packs_weights(const at::Device& device, at::ScalarType dtype);
// Whether `weight` [out, in] can be packed: a plain 2-D tensor that packs_weights allows.
bool can_pack_weight(const at::Tensor& weight);
// The packed form of `weight` (an opaque oneDNN tensor; unpacked_weight() restores it
// bit for bit).
at::Tensor pack_weight(const at::Tensor& weight);
at::Tensor unpacked_weight(const at::Tensor& weight);

// in [..., in] x weight^T (+ bias): at::linear, or oneDNN's product for a packed weight.
at::Tensor linear_product(const at::Tensor& in, const at::Tensor& weight, const at::Tensor& bias = {});

}  // namespace areal
