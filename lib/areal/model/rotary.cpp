#include "areal/model/rotary.h"

#include <ATen/ATen.h>

namespace areal {

std::pair<at::Tensor, at::Tensor> rotary_cos_sin(const at::Tensor& positions, int64_t head_dim, double theta,
                                                 at::ScalarType dtype) {
  auto f32 = positions.options().dtype(at::kFloat);
  at::Tensor exponent = at::arange(0, head_dim, 2, positions.options().dtype(at::kLong)).to(at::kFloat) / head_dim;
  at::Tensor inv_freq = 1.0 / at::pow(theta, exponent);  // [head_dim / 2]
  at::Tensor freqs = positions.to(f32).unsqueeze(-1) * inv_freq;  // [B, T, head_dim / 2]
  at::Tensor angles = at::cat({freqs, freqs}, -1);
  return {angles.cos().to(dtype), angles.sin().to(dtype)};
}

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1);
}

}  // namespace areal
