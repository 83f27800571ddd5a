// A linear layer for bfloat16 training on the CPU whose weight gradient multiplies the
// output gradient transposed first (an autograd function; values as at::linear's).
//
// The weight gradient is g^T x, summed over the tokens. Given g^T as a transposed view,
// oneDNN runs it at half speed or less (2,288 tokens: 4.4 ms for a 640 x 1,792 weight,
// 6.0 ms for 1,792 x 640) where the same product from a transposed copy takes 2.2 ms
// and the copy 0.1-0.3 ms (16 x 16 tiles, util/bfloat16_rows.h). float32 shows no such
// gap. The input gradient and the bias's are at::linear's.
#pragma once

#include <ATen/core/Tensor.h>

namespace areal {

// Whether bfloat16_linear applies: CPU bfloat16 input and weight, gradients recorded and
// the weight learning (a frozen weight's product stays at::linear).
bool bfloat16_linear_applies(const at::Tensor& in, const at::Tensor& weight);

// in [..., k] times weight [n, k]^T (+ bias [n]).
at::Tensor bfloat16_linear(const at::Tensor& in, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace areal
