#include "areal/fsdp/sharded_model.h"

#include <ATen/ATen.h>

namespace areal {

ShardedModel::ShardedModel(std::shared_ptr<CausalLM> skeleton, std::vector<UnitLayout> units, int rank,
                           int world_size, at::Device device)
    : skeleton_(std::move(skeleton)), units_(std::move(units)), rank_(rank), world_size_(world_size) {
  // Zero-filled although every init path overwrites every element: touching the pages
  // here, on all ranks at once, is cheaper than faulting them in during the scatter
  // (measured: -np 2, 0.5 B model, 1.30 s vs 1.78 s for the whole init).
  for (const auto& u : units_) shards_.push_back(at::zeros({u.shard_numel}, at::TensorOptions(device).dtype(at::kFloat)));
}

int64_t ShardedModel::shard_bytes() const {
  int64_t bytes = 0;
  for (const auto& s : shards_) bytes += s.numel() * s.element_size();
  return bytes;
}

std::unique_ptr<ShardedModel> ShardedModel::frozen_copy() const {
  auto copy = std::make_unique<ShardedModel>(skeleton_, units_, rank_, world_size_, shards_.at(0).device());
  for (size_t u = 0; u < shards_.size(); ++u) copy->shards_[u].copy_(shards_[u].detach());
  return copy;
}

namespace {

at::Tensor gather(const UnitLayout& layout, const at::Tensor& shard_master, Communicator& comm, at::ScalarType dtype) {
  at::Tensor shard = shard_master.to(dtype);
  at::Tensor full = at::empty({layout.padded_numel}, shard.options());
  comm.all_gather(shard, full);
  return full;
}

std::vector<std::pair<std::string, at::Tensor>> views(const UnitLayout& layout, const at::Tensor& flat) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& slot : layout.params) out.emplace_back(slot.name, flat.narrow(0, slot.offset, slot.numel).view(slot.shape));
  return out;
}

}  // namespace

at::Tensor ShardedModel::gather_unit(size_t unit, Communicator& comm, at::ScalarType dtype) const {
  return gather(units_.at(unit), shards_.at(unit), comm, dtype);
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
  return gather(adapter_units_.at(layer), adapter_shards_.at(layer), comm, dtype);
}

std::vector<std::pair<std::string, at::Tensor>> ShardedModel::adapter_views(size_t layer, const at::Tensor& flat) const {
  return views(adapter_units_.at(layer), flat);
}

std::vector<std::pair<std::string, at::Tensor>> ShardedModel::unit_views(size_t unit, const at::Tensor& flat) const {
  return views(units_.at(unit), flat);
}

}  // namespace areal
