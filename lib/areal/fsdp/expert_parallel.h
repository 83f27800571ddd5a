// Expert parallelism on the FSDP shards (actor.backend `fsdp:dNeE`, AReaL's `e`).
//
// The ranks form groups of E consecutive ranks; in a group, rank p computes experts
// [p * experts / E, (p + 1) * experts / E) of every sparse layer for the tokens of all E
// ranks, which reach it and return by all-to-all (model/functional.h's ExpertParallel).
// The shards stay as FSDP lays them out (unit_layout.h: every weight over every rank),
// so loading, saving, the optimizer, recovery and generation are unchanged. What changes
// is a sparse layer's gather and gradient:
//   - gather: a rank receives its layer's weights without the experts it does not run
//     (one all-to-all of the pieces each rank's shard holds of what each rank runs),
//     into a compact flat laid out by local_layout();
//   - gradient: each piece of that flat's gradient goes back to the shard that holds it,
//     where the pieces of every rank are summed and averaged over the ranks, as the
//     reduce-scatter does: an expert's gradient is summed over the ranks that ran it only.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "areal/dist/communicator.h"
#include "areal/fsdp/unit_layout.h"
#include "areal/model/functional.h"

namespace areal {

class ExpertParallelism {
 public:
  // Collective over `comm`: makes the groups of `degree` ranks. `units`: the model's
  // (unit_layout.h). Throws std::invalid_argument when `degree` divides the ranks or the
  // experts not.
  ExpertParallelism(Communicator& comm, const ModelConfig& config, const std::vector<UnitLayout>& units, int degree);
  ~ExpertParallelism();

  int degree() const { return degree_; }
  // Whether `unit` is a sparse layer (its gather and gradient go through here).
  bool covers(size_t unit) const { return plans_.count(unit) > 0; }
  // The weights of `unit` this rank runs, back to back in the unit's order (padded_numel
  // = numel: nothing else is in the flat).
  const UnitLayout& local_layout(size_t unit) const { return plans_.at(unit).local; }

  // Collective over the ranks: this rank's shard of `unit` (in the compute dtype) ->
  // `out` (local_layout's numel, the same dtype): the weights this rank runs. `scratch`
  // (at least pieces_numel(unit) elements, the shard's dtype) holds what is sent.
  void gather(size_t unit, const at::Tensor& shard, at::Tensor& out, const at::Tensor& scratch);
  // Collective over the ranks: the gradient of local_layout's weights, averaged over the
  // ranks, added into the float32 gradient of `target` (this rank's shard of the unit).
  // `scratch` (at least pieces_numel(unit) elements, local_grad's dtype) receives the pieces.
  void reduce(size_t unit, const at::Tensor& local_grad, const at::Tensor& scratch, const at::Tensor& target);
  // The elements of this rank's shard of `unit` that the ranks run, counted once per rank.
  int64_t pieces_numel(size_t unit) const;

  // What a sparse layer's expert_mixture calls (the group's all-to-alls, differentiable).
  const ExpertParallel& layer_parallel() const { return layer_parallel_; }

 private:
  using Pieces = std::vector<std::pair<int64_t, int64_t>>;  // (offset, elements)
  struct Plan {
    UnitLayout local;
    std::vector<Pieces> send;  // [rank]: the pieces of this rank's shard that rank runs (shard offsets)
    std::vector<int64_t> send_counts, recv_counts;
    int64_t shard_numel = 0;
  };
  Communicator& comm_;
  std::unique_ptr<Communicator> group_;
  int degree_;
  std::map<size_t, Plan> plans_;
  ExpertParallel layer_parallel_;
};

}  // namespace areal
