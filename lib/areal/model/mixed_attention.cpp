#include "areal/model/mixed_attention.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

namespace areal {
namespace {

struct MixedAttentionFunction : public torch::autograd::Function<MixedAttentionFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, std::optional<double> scale) {
    auto [out, logsumexp] =
        at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, /*is_causal=*/true, std::nullopt, scale);
    ctx->save_for_backward({q, k, v, out, logsumexp});
    ctx->saved_data["scale"] = scale ? c10::IValue(*scale) : c10::IValue();
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &logsumexp = saved[4];
    const c10::IValue& s = ctx->saved_data["scale"];
    const std::optional<double> scale = s.isNone() ? std::nullopt : std::optional<double>(s.toDouble());
    auto f32 = [](const at::Tensor& t) { return t.to(at::kFloat); };
    auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        f32(grads[0]), f32(q), f32(k), f32(v), f32(out), logsumexp, 0.0, /*is_causal=*/true, std::nullopt, scale);
    return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type()), at::Tensor()};
  }
};

}  // namespace

at::Tensor mixed_precision_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     std::optional<double> scale) {
  return MixedAttentionFunction::apply(q, k, v, scale);
}

}  // namespace areal
