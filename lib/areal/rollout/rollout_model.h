// The policy as generation holds it: this rank's tensor-parallel slice of every weight.
//
// A generation replica is a group of t ranks (`rollout.backend: areal:dDtT`). Each holds
//   - 1/t of the attention heads: q/k/v by output rows (its heads), o_proj by input
//     columns (with fewer key/value heads than t, each is replicated on t / kv_heads
//     ranks); 1/t of the MLP: gate/up by output rows, down_proj by input columns
//     (Megatron's column- and row-parallel pairs; one all-reduce after each pair);
//   - 1/t of the vocabulary, for the embedding (a rank looks up the ids it holds and
//     an all-reduce sums the rows) and the head (each rank keeps its columns of the
//     logits; sampling agrees on the token without joining them, sampling.h);
//   - the norms whole (a few KiB).
// A layer's q, k and v slices are held as one weight (self_attn.qkv_proj), and gate and
// up as one (mlp.gate_up_proj): one product each in the forward (functional.h);
// named_slices() gives them back by their Hugging Face names.
// So a rank holds weights/t and a KV cache for its kv_heads/t. The slices come straight
// from the FSDP shards, one unit at a time: at most one unit is whole on a rank beyond
// its slices (docs/rl.md). With t = 1 the whole model is this rank's slice.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "areal/dist/communicator.h"
#include "areal/fsdp/policy.h"
#include "areal/model/functional.h"
#include "areal/model/transformer.h"

namespace areal {

// Throws ConfigError unless `tensor_parallel` ranks can split the model's attention
// heads and MLP evenly, and its key/value heads evenly or into replicas (t a multiple
// of them), and a mixture of experts' experts: each expert's channels, or with
// `whole_experts` the experts themselves. The vocabulary needs no even split.
void check_tensor_parallel(const ModelConfig& config, int64_t tensor_parallel, bool whole_experts = false);
// Key/value heads on each rank: kv_heads / t, or 1 (replicated) when t > kv_heads.
int64_t tensor_parallel_kv_heads(const ModelConfig& config, int64_t tensor_parallel);

class RolloutModel {
 public:
  // t = 1 over a whole model: shares its tensors (no copies, no collectives).
  explicit RolloutModel(const CausalLM& model);
  // This rank's slices of `policy`'s weights in `dtype` on `device`, LoRA merged, taken
  // unit by unit from the shards. Collective over the policy's ranks (each unit's
  // gather); `group` is this rank's tensor-parallel group (nullptr: t = 1), used by the
  // forward.
  // `whole_experts` (rollout.backend's eT): a mixture of experts' experts are not split
  // like an MLP but placed whole, experts/t on each rank (expert parallelism in the
  // group: every rank has every token, runs its own experts' rows, and the layer's sum
  // over the group adds the others').
  RolloutModel(const Policy& policy, Communicator* group, at::ScalarType dtype, const at::Device& device,
               bool whole_experts = false);
  // The same from units that come one at a time from elsewhere (asynchronous RL: the
  // trainer sends them, weight_sync.h): `unit(u)` returns unit u's weights whole by
  // Hugging Face name, for u < units; each is sliced and dropped before the next.
  using UnitSource = std::function<std::map<std::string, at::Tensor>(size_t u)>;
  RolloutModel(const ModelConfig& config, size_t units, const UnitSource& unit, Communicator* group,
               at::ScalarType dtype, const at::Device& device, bool whole_experts = false);

  // Newer weights in place, unit by unit (interruptible generation): each slice is
  // replaced as its unit comes, so no second copy of the weights is ever held.
  void replace(size_t units, const UnitSource& unit);

  const ModelConfig& config() const { return config_; }        // the whole model's shape
  int64_t local_kv_heads() const { return local_.num_key_value_heads; }
  const at::TensorOptions& options() const { return options_; }
  int64_t weight_bytes() const;  // this rank's slices

  // The forward in three parts, each collective over the group when t > 1.
  at::Tensor embed(const at::Tensor& ids);  // [B, T] -> [B, T, hidden]
  // Layer i; `attention.cached` holds this layer's keys and values (paged_kv_cache.h).
  // `choices` (a sparse layer): filled with its router's choices (ExpertChoices).
  at::Tensor layer(size_t i, const at::Tensor& hidden, const AttentionInputs& attention,
                   ExpertChoices* choices = nullptr);
  // [B, T, hidden] -> this rank's vocabulary columns [B, T, vocab_columns()], token
  // ids vocab_begin() on (at t = 1 the whole vocabulary; the last rank's columns past
  // the vocabulary are padding). Sampling joins the ranks' columns (sampling.h).
  at::Tensor local_logits(const at::Tensor& hidden);
  int64_t vocab_begin() const { return vocab_begin_; }
  int64_t vocab_columns() const { return vocab_rows_; }
  Communicator* group() const { return group_; }
  // This rank's slices by Hugging Face name (tests compare them bit for bit).
  std::map<std::string, at::Tensor> named_slices() const;

 private:
  // Keeps this rank's part of weight `name` (Hugging Face name); `own`: as a copy.
  void add_slice(const std::string& name, const at::Tensor& whole, bool own);
  // A layer's q, k, v (and gate, up) slices, once all here, replaced by one fused
  // product's weight (self_attn.qkv_proj, mlp.gate_up_proj), packed.
  void fuse_products(std::map<std::string, at::Tensor>& weights);
  void all_reduce(at::Tensor& t);

  ModelConfig config_;
  ModelConfig local_;  // this rank's head counts
  Communicator* group_ = nullptr;
  int64_t tensor_parallel_ = 1, rank_ = 0;
  ExpertParallel whole_experts_;  // ranks > 1: experts whole, [rank * E / t, (rank + 1) * E / t) here
  int64_t vocab_begin_ = 0, vocab_rows_ = 0;  // this rank's vocabulary rows (the last rank's padded with zeros)
  at::TensorOptions options_;
  at::Tensor embed_, head_, norm_;  // head_ is embed_ when tied
  std::vector<std::map<std::string, at::Tensor>> layers_;
};

}  // namespace areal
