#include "areal/model/swiglu.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>

#include <cmath>
#include <vector>

#include "areal/util/bfloat16_rows.h"
#include "areal/util/vector_clones.h"
#include "areal/util/vector_lanes.h"

namespace areal {
namespace {

typedef float Lanes __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;

// out = silu(g) * u over n values, each product rounded to bfloat16 with `round`.
// silu(g) = g * sigmoid(g), sigmoid from e = e^-|g| (never overflows): 1 / (1 + e) for
// g >= 0, e / (1 + e) below.
AREAL_VECTOR_CLONES void gated_row(const float* __restrict g, const float* __restrict u, int64_t n, bool round,
                                   float* __restrict out) {
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    Lanes x, up;
    __builtin_memcpy(&x, g + j, sizeof x);
    __builtin_memcpy(&up, u + j, sizeof up);
    Lanes e = x < 0 ? x : -x;
    exp_of_nonpositive(e);
    Lanes s = x * ((x < 0 ? e : 1.0f) / (1.0f + e));
    if (round) round_to_bfloat16(s);
    s *= up;
    if (round) round_to_bfloat16(s);
    __builtin_memcpy(out + j, &s, sizeof s);
  }
  for (; j < n; ++j) {
    const float e = std::exp(-std::fabs(g[j]));
    Lanes s = {g[j] * ((g[j] < 0 ? e : 1.0f) / (1.0f + e))};
    if (round) round_to_bfloat16(s);
    s[0] *= u[j];
    if (round) round_to_bfloat16(s);
    out[j] = s[0];
  }
}

}  // namespace

bool fuses_swiglu(const at::Tensor& gate_up) {
  return gate_up.is_cpu() && (gate_up.scalar_type() == at::kFloat || gate_up.scalar_type() == at::kBFloat16) &&
         gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0 && gate_up.stride(-1) == 1 && !at::GradMode::is_enabled();
}

at::Tensor swiglu(const at::Tensor& gate_up) {
  RECORD_FUNCTION("areal::swiglu", std::vector<c10::IValue>());  // named in profiles
  TORCH_CHECK(fuses_swiglu(gate_up), "swiglu: takes a CPU float32 or bfloat16 [..., 2I] without gradients");
  const at::Tensor x = gate_up.contiguous();
  const int64_t width = x.size(-1), n = width / 2, rows = x.numel() / width;
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = n;
  at::Tensor out = at::empty(sizes, x.options());
  const bool bfloat16 = x.scalar_type() == at::kBFloat16;
  const auto* in = static_cast<const char*>(x.const_data_ptr());
  auto* to = static_cast<char*>(out.mutable_data_ptr());
  const int64_t bytes = x.element_size();
  at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / n), [&](int64_t begin, int64_t end) {
    std::vector<float> g(n), u(n), y(n);
    for (int64_t r = begin; r < end; ++r) {
      read_floats(in + r * width * bytes, bfloat16, n, g.data());
      read_floats(in + (r * width + n) * bytes, bfloat16, n, u.data());
      gated_row(g.data(), u.data(), n, bfloat16, y.data());
      write_floats(y.data(), bfloat16, n, to + r * n * bytes);
    }
  });
  return out;
}

}  // namespace areal
