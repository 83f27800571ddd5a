#include "areal/model/bfloat16_linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>

#include "areal/util/bfloat16_rows.h"

namespace areal {
namespace {

// The transpose of a [m, n] bfloat16 matrix, its rows split between the threads (each
// reads whole rows: column stripes read each cache line twice and took 1.8x as long).
at::Tensor transposed(const at::Tensor& g) {
  const at::Tensor x = g.contiguous();
  const int64_t m = x.size(0), n = x.size(1);
  at::Tensor out = at::empty({n, m}, x.options());
  const auto* from = static_cast<const uint16_t*>(x.const_data_ptr());
  auto* to = static_cast<uint16_t*>(out.mutable_data_ptr());
  at::parallel_for(0, (m + 15) / 16, 16, [&](int64_t begin, int64_t end) {  // blocks of 16 rows
    const int64_t first = begin * 16, last = std::min(m, end * 16);
    transpose_bfloat16(from + first * n, last - first, n, n, to + first, m);
  });
  return out;
}

struct Bfloat16LinearFunction : public torch::autograd::Function<Bfloat16LinearFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& in, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias) {
    ctx->save_for_backward({in, weight});
    ctx->saved_data["bias"] = bias.has_value();
    return at::linear(in, weight, bias);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    RECORD_FUNCTION("areal::bfloat16_linear_backward", std::vector<c10::IValue>());  // named in profiles
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &in = saved[0], &weight = saved[1];
    const at::Tensor g = grads[0].reshape({-1, weight.size(0)});
    at::Tensor d_in, d_weight, d_bias;
    if (ctx->needs_input_grad(0)) d_in = g.mm(weight).view(in.sizes());
    if (ctx->needs_input_grad(1)) d_weight = transposed(g).mm(in.reshape({-1, weight.size(1)}));
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2)) d_bias = g.sum(0);
    return {d_in, d_weight, d_bias};
  }
};

}  // namespace

bool bfloat16_linear_applies(const at::Tensor& in, const at::Tensor& weight) {
  return in.is_cpu() && in.scalar_type() == at::kBFloat16 && weight.scalar_type() == at::kBFloat16 &&
         weight.dim() == 2 && !weight.is_mkldnn() && at::GradMode::is_enabled() && weight.requires_grad();
}

at::Tensor bfloat16_linear(const at::Tensor& in, const at::Tensor& weight, const at::Tensor& bias) {
  return Bfloat16LinearFunction::apply(in, weight, bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt);
}

}  // namespace areal
