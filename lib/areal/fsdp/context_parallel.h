// Context parallelism on the FSDP shards (Ulysses; issue 41, the engine's part so far).
//
// The ranks form groups of C consecutive ranks (C ranks T apart with tensor parallelism
// over T: tensor_parallel.h); each rank of a group holds a contiguous
// chunk of every sequence's tokens (rank p: tokens [p * T / C, (p + 1) * T / C)) and runs
// the layers on them. The projections, norms, MLP and head need only the rank's own
// tokens; attention exchanges heads for tokens by all-to-all (model/functional.h's
// ContextParallel): each rank attends over the whole sequence for C-th of the heads and
// sends the results back. The shards stay as FSDP lays them out over every rank, and a
// unit's gradient is averaged over all of them, so a rank's loss is its chunk's share of
// its sequences' loss times C (the group's ranks share those sequences).
#pragma once

#include <memory>

#include "areal/dist/communicator.h"
#include "areal/model/functional.h"

namespace areal {

class ContextParallelism {
 public:
  // Collective over `comm`: makes the groups of `degree` ranks, `stride` apart (with
  // tensor parallelism its groups are the consecutive ranks: a context group holds one
  // rank of each of `degree` tensor-parallel groups; `config` is then the heads a rank
  // runs, TensorParallelism::local_config). Throws std::invalid_argument when `degree`
  // does not divide the ranks or the attention heads, neither divides nor is a multiple
  // of the key/value heads (fewer: each is repeated for the ranks that share it), or the
  // model is a mixture of experts (not built with it).
  ContextParallelism(Communicator& comm, const ModelConfig& config, int degree, int stride = 1);
  ~ContextParallelism();

  int degree() const { return static_cast<int>(layer_parallel_.ranks); }
  int rank() const { return static_cast<int>(layer_parallel_.rank); }  // in the group: its chunk
  // What a layer's attention calls (the group's all-to-alls, differentiable).
  const ContextParallel& layer_parallel() const { return layer_parallel_; }
  // The group's ranks (they share their sequences), and the ranks of this one's chunk
  // index over all groups (every sequence is on exactly one of them: batch statistics).
  Communicator& group() { return *group_; }
  Communicator& data_group() { return *data_group_; }

 private:
  std::unique_ptr<Communicator> group_, data_group_;
  ContextParallel layer_parallel_;
};

}  // namespace areal
