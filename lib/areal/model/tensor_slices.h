// A tensor-parallel rank's share of a decoder layer's weights (Megatron's layout), one
// rule for generation (rollout/) and training (fsdp/tensor_parallel.h):
//   - q/k/v, gate/up (and each expert's) by output rows: the rank's heads and channels
//     (with fewer key/value heads than ranks, each is shared by t / kv_heads ranks);
//   - o_proj, down_proj (and each expert's) by input columns; their outputs are partial
//     sums that the layer adds over the group;
//   - the norms, a router and everything else whole.
// LoRA's adapters follow their projection: lora_B by rows of a column-parallel one,
// lora_A by columns of a row-parallel one; the other side whole.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "areal/model/model_config.h"

namespace areal {

// How a rank holds a weight, for what its gradient means under training.
enum class TensorShare {
  split,          // its slice: the gradient of the slice, this rank's alone
  whole,          // whole, on whole activations (norms): the same gradient on every rank
  whole_partial,  // whole, on this rank's heads or channels (q/k norms, LoRA's whole side): a partial gradient
  first_rank,     // a row-parallel bias: added once, by the group's first rank (undefined elsewhere)
};

struct TensorSlice {
  at::Tensor weight;  // a view of the whole weight (undefined: the rank holds none)
  TensorShare share = TensorShare::whole;
};

// How every rank holds the layer weight named `inside`.
TensorShare tensor_parallel_share(const std::string& inside);

// This rank's (`rank` of `ranks`) share of the layer weight named `inside` ("mlp.up_proj.weight").
TensorSlice tensor_parallel_slice(const ModelConfig& config, const std::string& inside, const at::Tensor& whole,
                                  int64_t ranks, int64_t rank);

// The model as one rank of `ranks` sees its layers: its attention heads, key/value
// heads (kv_heads / t, or 1 when shared), MLP and each expert's channels.
ModelConfig tensor_parallel_config(const ModelConfig& config, int64_t ranks);

// Whether `ranks` split the attention heads and the MLP's channels evenly, and the
// key/value heads evenly or into replicas (ranks a multiple of them).
bool tensor_parallel_splits(const ModelConfig& config, int64_t ranks);

// The embeddings of `ids` from a rank's rows [first, first + rows.size(0)) of the
// vocabulary, zeros for the ids other ranks hold: the sum over the group is the lookup.
at::Tensor embed_vocab_rows(const at::Tensor& rows, const at::Tensor& ids, int64_t first);

}  // namespace areal
