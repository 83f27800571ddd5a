#include "areal/fsdp/sharded_model.h"

#include <ATen/ATen.h>

namespace areal {

ShardedModel::ShardedModel(std::shared_ptr<CausalLM> skeleton, std::vector<UnitLayout> units, int rank,
                           int world_size, at::Device device)
    : skeleton_(std::move(skeleton)), units_(std::move(units)), rank_(rank), world_size_(world_size) {
  for (const auto& u : units_) shards_.push_back(at::zeros({u.shard_numel}, at::TensorOptions(device).dtype(at::kFloat)));
}

int64_t ShardedModel::shard_bytes() const {
  int64_t bytes = 0;
  for (const auto& s : shards_) bytes += s.numel() * s.element_size();
  return bytes;
}

at::Tensor ShardedModel::gather_unit(size_t unit, Communicator& comm, at::ScalarType dtype) const {
  at::Tensor shard = shards_.at(unit).to(dtype);
  at::Tensor full = at::empty({units_.at(unit).padded_numel}, shard.options());
  comm.all_gather(shard, full);
  return full;
}

void ShardedModel::add_adapters(std::vector<UnitLayout> adapter_units, double scale) {
  adapter_units_ = std::move(adapter_units);
  adapter_scale_ = scale;
  for (const auto& u : adapter_units_)
    adapter_shards_.push_back(at::zeros({u.shard_numel}, shards_.at(0).options()));
}

std::vector<at::Tensor> ShardedModel::trainable_shards() {
  return has_adapters() ? adapter_shards_ : shards_;
}

at::Tensor ShardedModel::gather_adapter(size_t layer, Communicator& comm, at::ScalarType dtype) const {
  at::Tensor shard = adapter_shards_.at(layer).to(dtype);
  at::Tensor full = at::empty({adapter_units_.at(layer).padded_numel}, shard.options());
  comm.all_gather(shard, full);
  return full;
}

std::vector<std::pair<std::string, at::Tensor>> ShardedModel::adapter_views(size_t layer, const at::Tensor& flat) const {
  std::vector<std::pair<std::string, at::Tensor>> views;
  for (const auto& slot : adapter_units_.at(layer).params)
    views.emplace_back(slot.name, flat.narrow(0, slot.offset, slot.numel).view(slot.shape));
  return views;
}

std::vector<std::pair<std::string, at::Tensor>> ShardedModel::unit_views(size_t unit, const at::Tensor& flat) const {
  std::vector<std::pair<std::string, at::Tensor>> views;
  for (const auto& slot : units_.at(unit).params)
    views.emplace_back(slot.name, flat.narrow(0, slot.offset, slot.numel).view(slot.shape));
  return views;
}

}  // namespace areal
