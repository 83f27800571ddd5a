#include "areal/model/packed_weights.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string_view>

namespace areal {

namespace {

// torch registers these for its own compiler's frozen CPU graphs (Inductor); they are
// reached through the dispatcher by name, as Inductor's generated code does.
at::Tensor reorder(const at::Tensor& weight) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("mkldnn::_reorder_linear_weight", "")
                       .typed<at::Tensor(const at::Tensor&, std::optional<int64_t>)>();
  return op.call(weight, std::nullopt);
}

at::Tensor packed_product(const at::Tensor& in, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                         std::string_view, c10::List<std::optional<at::Scalar>>,
                                         std::optional<std::string_view>)>();
  return op.call(in, weight, bias, "none", c10::List<std::optional<at::Scalar>>(), std::nullopt);
}

}  // namespace

bool packs_weights(const at::Device& device, at::ScalarType dtype) {
  return at::hasMKLDNN() && device.is_cpu() && (dtype == at::kFloat || dtype == at::kBFloat16);
}

bool can_pack_weight(const at::Tensor& weight) {
  return weight.dim() == 2 && !weight.is_mkldnn() && packs_weights(weight.device(), weight.scalar_type());
}

at::Tensor pack_weight(const at::Tensor& weight) { return reorder(weight.contiguous()); }

at::Tensor unpacked_weight(const at::Tensor& weight) { return weight.is_mkldnn() ? weight.to_dense() : weight; }

at::Tensor linear_product(const at::Tensor& in, const at::Tensor& weight, const at::Tensor& bias) {
  if (!weight.is_mkldnn()) return at::linear(in, weight, bias);
  return packed_product(in.contiguous(), weight, bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt);
}

}  // namespace areal
