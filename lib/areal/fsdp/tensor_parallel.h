// Tensor parallelism on the FSDP shards (actor.backend `fsdp:dDtT`, AReaL's `t`).
//
// The ranks form groups of T consecutive ranks; the ranks of a group run the same rows,
// each with its share of every layer (model/tensor_slices.h, the layout generation's
// groups take): its attention heads and MLP channels, and its rows of the vocabulary
// in the embedding (an all-reduce adds the rows of the others) and the head (each rank
// keeps its columns of the logits, vocab_parallel_logprobs joins them without
// gathering them, so no rank holds a long sequence's whole logits). Megatron's pair of
// operations makes the layers differentiable: `enter` (forward as is, backward summed
// over the group) before each column-parallel projection, `sum` (forward summed over
// the group, backward as is) after each row-parallel one.
//
// The shards stay as FSDP lays them out (every unit over every rank); a unit is gathered
// whole and each rank runs its slices of it. A unit's gradient is the gradient of its
// slices on each rank (zero elsewhere) and of its whole weights (norms) on the group's
// first rank only, averaged over all ranks by the reduce-scatter: so a rank's loss is
// its group's (every rank of a group computes the same one).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

#include "areal/dist/communicator.h"
#include "areal/model/functional.h"
#include "areal/model/model_config.h"

namespace areal {

class TensorParallelism {
 public:
  // Collective over `comm`: makes the groups of `degree` consecutive ranks. Throws
  // std::invalid_argument when `degree` does not divide the ranks, the attention heads
  // or the MLP channels, neither divides nor is a multiple of the key/value heads, or
  // the model is a mixture of experts (not built with it).
  TensorParallelism(Communicator& comm, const ModelConfig& config, int degree);
  ~TensorParallelism();

  int degree() const { return degree_; }
  int rank() const { return rank_; }  // in the group
  Communicator& group() const { return *group_; }
  // The ranks of this one's place in its group over all groups (every row once over them
  // when there is no context parallelism).
  Communicator& data_group() const { return *data_group_; }
  // The model as a rank runs its layers (its heads, key/value heads, channels).
  const ModelConfig& local_config() const { return local_; }
  // The vocabulary rows [vocab_begin, vocab_begin + vocab_rows) of the embedding and the
  // head this rank holds (the last rank's may be fewer).
  int64_t vocab_begin() const { return vocab_begin_; }
  int64_t vocab_rows() const { return vocab_rows_; }

  // A layer's weight `inside` (its name in the layer) as this rank runs it: its slice of
  // `whole`, a whole weight whose gradient is partial entered into the group, or
  // undefined (a row-parallel bias off the first rank).
  at::Tensor layer_weight(const std::string& inside, const at::Tensor& whole) const;
  // The embedding's or the head's rows of this rank, a view of `whole` [vocab, hidden].
  at::Tensor vocab_slice(const at::Tensor& whole) const;
  // Whether this rank's gradient of the weight `name` (a Hugging Face name) counts: a
  // split weight's on every rank, a whole one's on the group's first rank only.
  bool counts_gradient(const std::string& name) const;

  // Differentiable over the group (every rank of it calls them in the same order).
  at::Tensor sum(const at::Tensor& partial) const;  // forward: summed; backward: as is
  at::Tensor enter(const at::Tensor& x) const;      // forward: as is; backward: summed
  // What a decoder layer calls (model/functional.h).
  const TensorParallel& layer_parallel() const { return layer_parallel_; }

 private:
  std::unique_ptr<Communicator> group_, data_group_;
  int degree_ = 1, rank_ = 0;
  ModelConfig config_, local_;
  int64_t vocab_begin_ = 0, vocab_rows_ = 0;
  TensorParallel layer_parallel_;
};

// Log-probs of `targets` (any shape; logits [..., columns]) under softmax(logits /
// temperature) over the whole vocabulary, from this rank's columns of it (vocab_begin()
// on), with their graph; and the entropies (no graph) when asked. Collective over the group.
struct VocabLogprobs {
  at::Tensor logprobs, entropy;
};
VocabLogprobs vocab_parallel_logprobs(const TensorParallelism& tensor, const at::Tensor& logits,
                                      const at::Tensor& targets, double temperature, bool entropy);

}  // namespace areal
