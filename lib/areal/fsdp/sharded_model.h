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
  // Allocates this rank's shards (zeros) on `device`.
  ShardedModel(std::shared_ptr<CausalLM> skeleton, std::vector<UnitLayout> units, int rank, int world_size,
               at::Device device);

  CausalLM& skeleton() { return *skeleton_; }
  const ModelConfig& config() const { return skeleton_->config(); }
  const std::vector<UnitLayout>& units() const { return units_; }
  at::Tensor& shard(size_t unit) { return shards_.at(unit); }
  const at::Tensor& shard(size_t unit) const { return shards_.at(unit); }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int64_t shard_bytes() const;  // this rank's shards, all units

  // Collective: unit `unit` whole (its padded flat buffer) on every rank, in `dtype`.
  at::Tensor gather_unit(size_t unit, Communicator& comm, at::ScalarType dtype) const;
  // Views of `flat` (a gathered unit) shaped as the unit's parameters, by name.
  std::vector<std::pair<std::string, at::Tensor>> unit_views(size_t unit, const at::Tensor& flat) const;

 private:
  std::shared_ptr<CausalLM> skeleton_;
  std::vector<UnitLayout> units_;
  std::vector<at::Tensor> shards_;
  int rank_;
  int world_size_;
};

}  // namespace areal
