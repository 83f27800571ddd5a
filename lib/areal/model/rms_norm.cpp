#include "areal/model/rms_norm.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "areal/util/bfloat16_rows.h"
#include "areal/util/vector_clones.h"

namespace areal {
namespace {

// Each loop is written over 16-lane vectors (GCC's vector types: at -O2 GCC leaves a plain
// loop scalar), then the remainder. Vectors move through memcpy (any alignment).
typedef float Lanes __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;

// The sum of a[i] * b[i], in 16 lanes.
AREAL_VECTOR_CLONES float dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  Lanes acc = {}, x, y;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    __builtin_memcpy(&x, a + i, sizeof x);
    __builtin_memcpy(&y, b + i, sizeof y);
    acc += x * y;
  }
  float sum = 0;
  for (int64_t l = 0; l < kLanes; ++l) sum += acc[l];
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// The rows of a float32 or bfloat16 tensor, read and written in float32.
struct Rows {
  const at::Tensor& t;
  int64_t n;
  void load(int64_t row, float* to) const {
    read_floats(static_cast<const char*>(t.const_data_ptr()) + row * n * t.element_size(),
                t.scalar_type() == at::kBFloat16, n, to);
  }
  void store(int64_t row, const float* from) const {
    write_floats(from, t.scalar_type() == at::kBFloat16, n,
                 static_cast<char*>(t.mutable_data_ptr()) + row * n * t.element_size());
  }
};

// Rows per task: small inputs (a decode step's few rows) stay on one thread.
int64_t grain(int64_t n) { return std::max<int64_t>(1, 16384 / n); }

// The scale each normalized value is multiplied by, in float32: w, or Gemma's 1 + w.
std::vector<float> scale_of(const at::Tensor& weight, bool gemma) {
  const at::Tensor w = weight.to(at::kFloat).contiguous();
  std::vector<float> scale(w.const_data_ptr<float>(), w.const_data_ptr<float>() + w.numel());
  if (gemma)
    for (float& s : scale) s += 1.0f;
  return scale;
}

// out = x * r.
AREAL_VECTOR_CLONES void normalize(const float* __restrict x, float r, int64_t n, float* __restrict out) {
  Lanes a;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    __builtin_memcpy(&a, x + j, sizeof a);
    a *= r;
    __builtin_memcpy(out + j, &a, sizeof a);
  }
  for (; j < n; ++j) out[j] = x[j] * r;
}

// to = a * b, or to += a * b with `add`.
AREAL_VECTOR_CLONES void multiply(const float* __restrict a, const float* __restrict b, int64_t n, bool add,
                                  float* __restrict to) {
  Lanes x, y, z = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    __builtin_memcpy(&x, a + j, sizeof x);
    __builtin_memcpy(&y, b + j, sizeof y);
    if (add) __builtin_memcpy(&z, to + j, sizeof z);
    z += x * y;
    __builtin_memcpy(to + j, &z, sizeof z);
    z = Lanes{};
  }
  for (; j < n; ++j) to[j] = (add ? to[j] : 0.0f) + a[j] * b[j];
}

// dn = dn * r - c * x.
AREAL_VECTOR_CLONES void input_gradient(float* __restrict dn, const float* __restrict x, float r, float c, int64_t n) {
  Lanes d, a;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    __builtin_memcpy(&d, dn + j, sizeof d);
    __builtin_memcpy(&a, x + j, sizeof a);
    d = d * r - c * a;
    __builtin_memcpy(dn + j, &d, sizeof d);
  }
  for (; j < n; ++j) dn[j] = dn[j] * r - c * x[j];
}

struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            double eps, bool gemma) {
    RECORD_FUNCTION("areal::rms_norm", std::vector<c10::IValue>());  // named in profiles
    const at::Tensor x = input.contiguous();
    const int64_t n = x.size(-1), rows = x.numel() / n;
    const bool round = !gemma && x.scalar_type() == at::kBFloat16;
    at::Tensor y = at::empty_like(x);
    at::Tensor rstd = at::empty({rows}, x.options().dtype(at::kFloat));
    const std::vector<float> scale = scale_of(weight, gemma);
    float* r_out = rstd.mutable_data_ptr<float>();
    const Rows in{x, n}, out{y, n};
    at::parallel_for(0, rows, grain(n), [&](int64_t begin, int64_t end) {
      std::vector<float> row(n), normed(n);
      for (int64_t i = begin; i < end; ++i) {
        in.load(i, row.data());
        const float r = 1.0f / std::sqrt(dot(row.data(), row.data(), n) / static_cast<float>(n) + static_cast<float>(eps));
        r_out[i] = r;
        normalize(row.data(), r, n, normed.data());
        if (round) round_to_bfloat16(normed.data(), n);
        multiply(normed.data(), scale.data(), n, /*add=*/false, row.data());
        out.store(i, row.data());
      }
    });
    ctx->save_for_backward({x, weight, rstd});
    ctx->saved_data["gemma"] = gemma;
    return y;
  }

  // With n = x * r (rounded as in the forward) and dn = dy * scale (rounded likewise):
  //   dx = r * dn - r^3 / N * sum(dn * x) * x,   dw = sum over rows of dy * n.
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    RECORD_FUNCTION("areal::rms_norm_backward", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &rstd = saved[2];
    const bool gemma = ctx->saved_data["gemma"].toBool();
    const at::Tensor dy = grads[0].to(x.scalar_type()).contiguous();
    const int64_t n = x.size(-1), rows = x.numel() / n;
    const bool round = !gemma && x.scalar_type() == at::kBFloat16;
    const std::vector<float> scale = scale_of(weight, gemma);
    at::Tensor dx = at::empty_like(x);
    // Each thread sums its rows' weight gradients apart; the threads' sums are added after.
    at::Tensor dw_parts = at::zeros({at::get_num_threads(), n}, x.options().dtype(at::kFloat));
    const float* r_in = rstd.const_data_ptr<float>();
    const Rows xs{x, n}, dys{dy, n}, dxs{dx, n};
    at::parallel_for(0, rows, grain(n), [&](int64_t begin, int64_t end) {
      float* dw = dw_parts.mutable_data_ptr<float>() + at::get_thread_num() * n;
      std::vector<float> row(n), grad(n), normed(n);  // normed, then dn, then dx
      for (int64_t i = begin; i < end; ++i) {
        xs.load(i, row.data());
        dys.load(i, grad.data());
        const float r = r_in[i];
        normalize(row.data(), r, n, normed.data());
        if (round) round_to_bfloat16(normed.data(), n);
        multiply(grad.data(), normed.data(), n, /*add=*/true, dw);
        multiply(grad.data(), scale.data(), n, /*add=*/false, normed.data());  // dn
        if (round) round_to_bfloat16(normed.data(), n);
        const float c = r * r * r * dot(normed.data(), row.data(), n) / static_cast<float>(n);
        input_gradient(normed.data(), row.data(), r, c, n);
        dxs.store(i, normed.data());
      }
    });
    return {dx, dw_parts.sum(0).to(weight.scalar_type()), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool fuses_rms_norm(const at::Tensor& x, const at::Tensor& weight) {
  return x.device().is_cpu() && (x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16) &&
         weight.scalar_type() == x.scalar_type() && weight.dim() == 1 && x.dim() >= 1 &&
         weight.size(0) == x.size(-1) && x.size(-1) > 0;
}

at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, bool gemma) {
  return RmsNormFunction::apply(x, weight, eps, gemma);
}

}  // namespace areal
