// The model as FSDP holds it: the meta-device skeleton (names, shapes, code) plus,
// for each unit, this rank's float32 master shard on its device.
#pragma once

#include <memory>
#include <vector>

#include "areal/dist/communicator.h"
#include "areal/fsdp/unit_layout.h"
#include "areal/model/transformer.h"

namespace areal {

class ShardedModel {
 public:
  // Allocates this rank's shards on `device`: zeros, or uninitialized for a caller that
  // writes every element at once (the sliced load reads straight into them).
  ShardedModel(std::shared_ptr<CausalLM> skeleton, std::vector<UnitLayout> units, int rank, int world_size,
               at::Device device, bool zero_fill = true);

  CausalLM& skeleton() { return *skeleton_; }
  const ModelConfig& config() const { return skeleton_->config(); }
  const std::vector<UnitLayout>& units() const { return units_; }
  at::Tensor& shard(size_t unit) { return shards_.at(unit); }
  const at::Tensor& shard(size_t unit) const { return shards_.at(unit); }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int64_t shard_bytes() const;  // this rank's shards, all units
  // A frozen copy of the base shards (no adapters): a reference policy for the KL penalty.
  std::unique_ptr<ShardedModel> frozen_copy() const;

  // LoRA (see lora.h): one adapter unit per decoder layer, sharded like the base; from
  // then on the base shards are frozen and the adapter shards are what trains.
  void add_adapters(std::vector<UnitLayout> adapter_units, double scale);
  bool has_adapters() const { return !adapter_units_.empty(); }
  double adapter_scale() const { return adapter_scale_; }
  const std::vector<UnitLayout>& adapter_units() const { return adapter_units_; }
  at::Tensor& adapter_shard(size_t layer) { return adapter_shards_.at(layer); }
  const at::Tensor& adapter_shard(size_t layer) const { return adapter_shards_.at(layer); }
  // The tensors an optimizer updates: the adapter shards with LoRA, else the base shards.
  std::vector<at::Tensor> trainable_shards();

  // Collective: unit `unit` whole (its padded flat buffer) on every rank, in `dtype`.
  at::Tensor gather_unit(size_t unit, Communicator& comm, at::ScalarType dtype) const;
  // Views of `flat` (a gathered unit) shaped as the unit's parameters, by name.
  std::vector<std::pair<std::string, at::Tensor>> unit_views(size_t unit, const at::Tensor& flat) const;
  // The same for an adapter unit (layer index).
  at::Tensor gather_adapter(size_t layer, Communicator& comm, at::ScalarType dtype) const;
  std::vector<std::pair<std::string, at::Tensor>> adapter_views(size_t layer, const at::Tensor& flat) const;

 private:
  std::shared_ptr<CausalLM> skeleton_;
  std::vector<UnitLayout> units_;
  std::vector<at::Tensor> shards_;
  std::vector<UnitLayout> adapter_units_;
  std::vector<at::Tensor> adapter_shards_;
  double adapter_scale_ = 0;
  int rank_;
  int world_size_;
};

}  // namespace areal
