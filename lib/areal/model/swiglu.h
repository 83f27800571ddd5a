// The gated MLP's activation for generation on the CPU: silu(gate) * up in one pass over
// the rows of the fused gate/up product (rollout_model.h), with the eager ops' roundings
// in the input's dtype, round(round(silu(gate)) * up). The eager form reads both halves
// through strided views in two ops, each a pass and a dispatch, per layer and decode step.
#pragma once

#include <ATen/core/Tensor.h>

namespace areal {

// Whether swiglu takes this: a CPU float32 or bfloat16 tensor [..., 2 * I] with its last
// dimension contiguous, no gradient recorded (generation; training keeps the autograd ops).
bool fuses_swiglu(const at::Tensor& gate_up);

// silu(gate_up[..., :I]) * gate_up[..., I:], [..., I] contiguous in gate_up's dtype.
at::Tensor swiglu(const at::Tensor& gate_up);

}  // namespace areal
