#include "areal/model/fused_rotary.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>

#include <vector>

#include "areal/util/bfloat16_rows.h"
#include "areal/util/vector_clones.h"
#include "areal/util/vector_lanes.h"

namespace areal {
namespace {

typedef float Lanes __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;

// One row of D = 2 * half values:
//   forward:  out = x c + r(x) s,      r(x) = (-x[half:], x[:half])
//   backward: out = x c + r'(x s),     r'(v) = (v[half:], -v[:half])  (r's transpose; x is the gradient)
// each product rounded to bfloat16 before the sum with `round`, as the eager ops round.
AREAL_VECTOR_CLONES void rotate_row(const float* __restrict x, const float* __restrict c, const float* __restrict s,
                                    int64_t half, bool backward, bool round, float* __restrict out) {
  int64_t j = 0;
  for (; j + kLanes <= half; j += kLanes) {
    Lanes lo, hi, c_lo, c_hi, s_lo, s_hi;  // x[j..], x[half + j..] and their cos, sin
    __builtin_memcpy(&lo, x + j, sizeof lo);
    __builtin_memcpy(&hi, x + half + j, sizeof hi);
    __builtin_memcpy(&c_lo, c + j, sizeof c_lo);
    __builtin_memcpy(&c_hi, c + half + j, sizeof c_hi);
    __builtin_memcpy(&s_lo, s + j, sizeof s_lo);
    __builtin_memcpy(&s_hi, s + half + j, sizeof s_hi);
    Lanes a_lo = lo * c_lo, a_hi = hi * c_hi;
    Lanes b_lo = backward ? hi * s_hi : -hi * s_lo, b_hi = backward ? -(lo * s_lo) : lo * s_hi;
    if (round) {
      round_to_bfloat16(a_lo);
      round_to_bfloat16(a_hi);
      round_to_bfloat16(b_lo);
      round_to_bfloat16(b_hi);
    }
    a_lo += b_lo;
    a_hi += b_hi;
    __builtin_memcpy(out + j, &a_lo, sizeof a_lo);
    __builtin_memcpy(out + half + j, &a_hi, sizeof a_hi);
  }
  for (; j < half; ++j) {
    Lanes v = {x[j] * c[j], x[half + j] * c[half + j], backward ? x[half + j] * s[half + j] : -x[half + j] * s[j],
               backward ? -(x[j] * s[j]) : x[j] * s[half + j]};
    if (round) round_to_bfloat16(v);
    out[j] = v[0] + v[2];
    out[half + j] = v[1] + v[3];
  }
}

// Over every (b, h, t) row of `in` [B, H, T, D] (last dimension contiguous), writes
// `out` (same strides) by rotate_row with the row's position's cos and sin, read once
// for the position's heads.
void rotate_rows(const at::Tensor& in, const at::Tensor& cos, const at::Tensor& sin, bool backward, at::Tensor& out) {
  const int64_t batch = in.size(0), heads = in.size(1), length = in.size(2), dim = in.size(3);
  const bool round = in.scalar_type() == at::kBFloat16;  // every tensor here is in's dtype
  const int64_t element = in.element_size();
  const char* in_base = static_cast<const char*>(in.const_data_ptr());
  char* out_base = static_cast<char*>(out.mutable_data_ptr());
  const char* cos_base = static_cast<const char*>(cos.const_data_ptr());
  const char* sin_base = static_cast<const char*>(sin.const_data_ptr());
  const bool per_row_table = cos.size(0) > 1;
  at::parallel_for(0, batch * length, std::max<int64_t>(1, 8192 / (heads * dim)), [&](int64_t first, int64_t last) {
    std::vector<float> x(dim), c(dim), s(dim), y(dim);
    for (int64_t position = first; position < last; ++position) {
      const int64_t b = position / length, t = position % length;
      const int64_t table_row = ((per_row_table ? b : 0) * length + t) * dim * element;
      read_floats(cos_base + table_row, round, dim, c.data());
      read_floats(sin_base + table_row, round, dim, s.data());
      for (int64_t h = 0; h < heads; ++h) {
        read_floats(in_base + (b * in.stride(0) + h * in.stride(1) + t * in.stride(2)) * element, round, dim, x.data());
        rotate_row(x.data(), c.data(), s.data(), dim / 2, backward, round, y.data());
        write_floats(y.data(), round, dim, out_base + (b * out.stride(0) + h * out.stride(1) + t * out.stride(2)) * element);
      }
    }
  });
}

struct RotaryFunction : public torch::autograd::Function<RotaryFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin) {
    RECORD_FUNCTION("areal::rotary", std::vector<c10::IValue>());  // named in profiles
    const at::Tensor c = cos.contiguous(), s = sin.contiguous();
    at::Tensor out = at::empty_like(x);  // x's strides (a transposed view stays one)
    rotate_rows(x, c, s, /*backward=*/false, out);
    ctx->save_for_backward({c, s});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    RECORD_FUNCTION("areal::rotary_backward", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    at::Tensor g = grads[0];
    if (g.stride(3) != 1) g = g.contiguous();
    at::Tensor dx = at::empty_like(g);
    rotate_rows(g, saved[0], saved[1], /*backward=*/true, dx);
    return {dx, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool fuses_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const bool dtype = (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16) &&
                     cos.scalar_type() == x.scalar_type() && sin.scalar_type() == x.scalar_type();
  return dtype && x.device().is_cpu() && x.dim() == 4 && x.size(3) % 2 == 0 && x.stride(3) == 1 && cos.dim() == 3 &&
         cos.sizes() == sin.sizes() && (cos.size(0) == 1 || cos.size(0) == x.size(0)) && cos.size(1) == x.size(2) &&
         cos.size(2) == x.size(3) && !cos.requires_grad() && !sin.requires_grad();
}

at::Tensor fused_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return RotaryFunction::apply(x, cos, sin);
}

}  // namespace areal
