// The decoder's computation as plain functions of tensors. The modules in
// transformer.h call these with their own parameters; the FSDP engine calls them with
// views of a gathered unit. One implementation, so both compute the same thing.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "areal/model/model_config.h"

namespace areal {

struct KVCache;

// A layer's weights by their name inside the layer ("self_attn.q_proj.weight");
// an undefined tensor for a name the layer does not have (a missing bias).
using LayerWeights = std::function<at::Tensor(const std::string& name)>;

// What attention needs besides the hidden states, for tokens [past, past + T).
struct AttentionInputs {
  at::Tensor cos, sin;  // rotary tables [B, T, head_dim] in the compute dtype
  at::Tensor mask;      // [B, 1, T, past + T]: true where a query may attend to a key
  // Packed sequences instead of a mask: one row (B = 1) holding several sequences back
  // to back; sequence i is tokens [starts[i], starts[i + 1]) (int64, CPU), attends
  // causally within itself and never across.
  at::Tensor sequence_starts;
  // Generation (rollout/'s paged KV cache): the cache stores the layer's keys and
  // values [B, kv_heads, T, head_dim] and returns the attention of the queries
  // [B, heads, T, head_dim] over the row's cached tokens; keys, values and mask unused.
  std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v)> cached;
};

// Positions count each sequence's real tokens (left padding is skipped over); a query
// attends to earlier non-padding keys and always to itself (so no row is all masked).
// With a cache, the cache's mask grows by this step's mask.
AttentionInputs attention_inputs(const ModelConfig& config, const at::Tensor& input_ids,
                                 const at::Tensor& attention_mask, KVCache* cache, at::ScalarType dtype);

// For one packed row: `lengths` sequences back to back (their sum is the row's length);
// positions restart at 0 for each sequence.
AttentionInputs packed_attention_inputs(const ModelConfig& config, const std::vector<int64_t>& lengths,
                                        const at::Device& device, at::ScalarType dtype);

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// Sums a row-parallel projection's partial outputs over a tensor-parallel group, in place.
using PartialSumReduce = std::function<void(at::Tensor&)>;

// One decoder layer; `keys`/`values` (undefined, or the cache's) grow by this step's,
// unless attention.cached keeps them.
// A linear `name` with weights `name.lora_A.weight` and `name.lora_B.weight` adds
// lora_scale * B (A x) (LoRA).
// Tensor parallelism (rollout/): `config` counts this rank's heads, the weights are its
// slices (q/k/v, gate/up by output rows; o_proj, down_proj by input columns), and
// `reduce` sums the o_proj and down_proj outputs over the group before each residual add.
at::Tensor decoder_layer(const ModelConfig& config, const LayerWeights& w, const at::Tensor& x,
                         const AttentionInputs& attention, at::Tensor& keys, at::Tensor& values,
                         double lora_scale = 0.0, const PartialSumReduce& reduce = {});

// Final norm and LM head (the embedding matrix when tied).
at::Tensor lm_logits(const ModelConfig& config, const at::Tensor& norm_weight, const at::Tensor& head_weight,
                     const at::Tensor& hidden);

}  // namespace areal
