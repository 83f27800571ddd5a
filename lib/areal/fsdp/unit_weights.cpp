#include "areal/fsdp/unit_weights.h"

#include <ATen/ATen.h>

namespace areal {

std::map<std::string, at::Tensor> gather_unit_weights(const ShardedModel& model, Communicator& comm, size_t u,
                                                      at::ScalarType dtype, bool merge) {
  // Merging adds in float32; otherwise the unit travels in the saved dtype already.
  // Units 1..layers are the decoder layers, the only ones with adapters.
  merge = merge && model.has_adapters() && u > 0 && u <= model.adapter_units().size();
  std::map<std::string, at::Tensor> views;
  for (auto& [name, view] : model.unit_views(u, model.gather_unit(u, comm, merge ? at::kFloat : dtype)))
    views[name] = view;
  if (merge) {
    std::map<std::string, at::Tensor> adapters;
    for (auto& [name, view] : model.adapter_views(u - 1, model.gather_adapter(u - 1, comm, at::kFloat)))
      adapters[name] = view;
    for (auto& [name, weight] : views) {
      const std::string module = name.substr(0, name.size() - std::string(".weight").size());
      auto a = adapters.find(module + ".lora_A.weight");
      if (a != adapters.end())
        weight.add_(at::matmul(adapters.at(module + ".lora_B.weight"), a->second), model.adapter_scale());
    }
  }
  for (auto& [name, view] : views) view = view.to(dtype);
  return views;
}

}  // namespace areal
