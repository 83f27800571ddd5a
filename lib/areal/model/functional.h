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
  at::Tensor cos_local, sin_local;  // Gemma 3's sliding layers' (their own rope base); else undefined
  at::Tensor mask;      // [B, 1, T, past + T]: true where a query may attend to a key
  at::Tensor mask_local;  // the same within the sliding window, for the sliding layers (else undefined)
  // Packed sequences instead of a mask: one row (B = 1) holding several sequences back
  // to back; sequence i is tokens [starts[i], starts[i + 1]) (int64, CPU), attends
  // causally within itself and never across.
  at::Tensor sequence_starts;
  // Shared prompts in a packed row: sequence i continues sequence prefixes[i] (int64,
  // CPU; -1: none), attending to all of that one's tokens before its own (a group's
  // answers after their one prompt). Undefined: no sequence continues another.
  at::Tensor sequence_prefixes;
  // Which of the B x T tokens are real (1) and which padding (0), as attention_inputs()
  // was given them; undefined: all real (packed rows, no mask). The routers'
  // load-balancing loss counts only the real ones, as transformers does.
  at::Tensor present;
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
// positions restart at 0 for each sequence. With `prefixes` (one per sequence, -1:
// none), sequence i continues the earlier sequence prefixes[i]: its positions follow
// that one's and it attends to it (AttentionInputs::sequence_prefixes; positions as if
// the two were one sequence, so not for dynamic NTK scaling, whose tables depend on a
// whole sequence's length).
AttentionInputs packed_attention_inputs(const ModelConfig& config, const std::vector<int64_t>& lengths,
                                        const at::Device& device, at::ScalarType dtype,
                                        const std::vector<int64_t>& prefixes = {});

// The rotary tables for `positions` [B, T] (and Gemma 3's local ones) into `inputs`.
void set_rotary(AttentionInputs& inputs, const at::Tensor& positions, const ModelConfig& config, at::ScalarType dtype,
                const at::Tensor& sequence_lengths = {});

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);
// The family's RMSNorm: LLaMA's (w * normed, in the input dtype) or Gemma's ((1 + w) in float32).
at::Tensor model_norm(const ModelConfig& config, const at::Tensor& x, const at::Tensor& weight);
// Token embeddings; Gemma scales them by sqrt(hidden_size) (in their dtype, as transformers).
at::Tensor embed_tokens(const ModelConfig& config, const at::Tensor& weight, const at::Tensor& ids);
at::Tensor scale_embeddings(const ModelConfig& config, const at::Tensor& embedded);

// Attention of q [B, heads, T, hd] over k, v [B, kv_heads, S, hd] with the model's scale
// (query_pre_attn_scalar) and Gemma 2's soft-capping of the scores (computed as
// transformers' eager attention then, SDPA otherwise). `mask` [B, 1, T, S] (true: may
// attend) or undefined; `causal`: each query up to itself, and with `window` > 0 only to
// the window's last keys (k > q - window, transformers' sliding window; q, k of one sequence).
at::Tensor attend(const ModelConfig& config, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& mask, bool causal, int64_t window = 0);

// Sums a row-parallel projection's partial outputs over a tensor-parallel group, in place.
using PartialSumReduce = std::function<void(at::Tensor&)>;

// What a sparse layer's router did with the real tokens (AttentionInputs::present): the
// parts of transformers' load-balancing loss (load_balancing_loss_func) and of the
// expert-load statistics. As transformers: softmax in the router logits' dtype, top-k of
// those probabilities.
struct RouterTally {
  at::Tensor probability_sum;  // [experts] float32: the tokens' router probabilities summed (with their graph)
  at::Tensor choice_counts;    // [experts] float32: how many of the tokens' top-k choices each expert got
  at::Tensor tokens;           // float32 scalar: the real tokens counted
};

// A sparse layer's expert choices (routing replay, docs/models.md). Generation reads the
// router's own choices; a training forward may route each token to the experts its
// rollout chose instead (the gate weights stay the router's probabilities at them), so
// that the experts trained are those that sampled the answer.
struct ExpertChoices {
  at::Tensor replay;  // in: [N, k] int64 each token's experts (a row of -1: its own top-k); undefined: none
  at::Tensor chosen;  // out: [N, k] int64 the router's own top-k of each token (route_tokens' order)
};

// Expert parallelism (fsdp/expert_parallel.h): a sparse layer's experts computed by a
// group of `ranks` ranks, rank p holding experts [p * E / ranks, (p + 1) * E / ranks) for
// the tokens of every rank of its group. The model knows nothing of ranks: it calls these.
// Without `exchange` every rank already has every token (a generation group, rollout/):
// a rank runs its experts' rows only, and its output is a partial sum that the layer's
// PartialSumReduce completes.
struct ExpertParallel {
  int64_t ranks = 1;
  int64_t rank = 0;  // in the group
  // Rows back to back by destination (send_rows[p] rows for rank p) -> the rows every rank
  // sent this one, back to back by source (recv_rows[p] from rank p). Differentiable.
  std::function<at::Tensor(const at::Tensor& rows, const std::vector<int64_t>& send_rows,
                           const std::vector<int64_t>& recv_rows)>
      exchange;
  // Counts, `per_rank` of them for each rank in turn -> those every rank sent this one.
  std::function<std::vector<int64_t>(const std::vector<int64_t>& counts, int64_t per_rank)> exchange_counts;
};

// Context parallelism (Ulysses; fsdp/context_parallel.h): every sequence's tokens split
// over a group of `ranks` ranks in contiguous chunks, rank p holding tokens
// [p * T / ranks, (p + 1) * T / ranks). Attention exchanges heads for tokens: `to_heads`
// turns this rank's [B, heads, T / ranks, D] into [B, heads / ranks, T, D] (its share of the
// heads over the whole sequence), `to_tokens` back. Differentiable. The attention inputs
// (rotary tables, masks) are the whole sequence's.
struct ContextParallel {
  int64_t ranks = 1;
  int64_t rank = 0;  // in the group
  std::function<at::Tensor(const at::Tensor&)> to_heads, to_tokens;
};

// Tensor parallelism in training (fsdp/tensor_parallel.h): `config` counts this rank's
// heads and channels, the weights are its slices, and the normalized input of each
// column-parallel pair enters the group by `enter` (as is forward, its gradient summed
// over the group backward). The row-parallel outputs are summed by the layer's
// PartialSumReduce (then differentiable).
struct TensorParallel {
  std::function<at::Tensor(const at::Tensor&)> enter;
};

// How one layer's work is spread over ranks besides the weights' slices (none by default).
struct LayerParallel {
  const ExpertParallel* experts = nullptr;
  const ContextParallel* context = nullptr;
  const TensorParallel* tensor = nullptr;
};

// transformers' load-balancing loss over `tallies` (one per sparse layer):
// experts * sum_e (C_e / R) * (P_e / R), C and P summed over the layers, R the tokens
// of all layers. Differentiable through the probability sums.
at::Tensor load_balancing_loss(const ModelConfig& config, const std::vector<RouterTally>& tallies);

// One decoder layer; `keys`/`values` (undefined, or the cache's) grow by this step's,
// unless attention.cached keeps them.
// A linear `name` with weights `name.lora_A.weight` and `name.lora_B.weight` adds
// lora_scale * B (A x) (LoRA).
// Tensor parallelism (rollout/): `config` counts this rank's heads, the weights are its
// slices (q/k/v, gate/up by output rows; o_proj, down_proj by input columns), and
// `reduce` sums the o_proj and down_proj outputs over the group before each residual add.
// `layer`: its index (Gemma's sliding layers take the local rotary tables).
// `router`: when given and the layer is sparse, filled with its router's tally;
// `choices` likewise, read and filled (ExpertChoices; N = B x T tokens, row-major).
// `parallel.experts`: a sparse layer's experts run expert-parallel (then `w` has this
// rank's only); `parallel.context`: `x` is this rank's chunk of each sequence (training,
// padded rows with a mask or packed rows; no cache); `parallel.tensor`: tensor-parallel
// training (TensorParallel).
at::Tensor decoder_layer(const ModelConfig& config, int64_t layer, const LayerWeights& w, const at::Tensor& x,
                         const AttentionInputs& attention, at::Tensor& keys, at::Tensor& values,
                         double lora_scale = 0.0, const PartialSumReduce& reduce = {},
                         RouterTally* router = nullptr, ExpertChoices* choices = nullptr,
                         const LayerParallel& parallel = {});

// A sparse layer's router on tokens [N, hidden]: logits [N, experts], and each token's
// top num_experts_per_tok experts [N, k] (int64) with their weights [N, k] (softmax
// probabilities, renormalized with norm_topk_prob), as transformers routes.
// `replay` ([N, k], ExpertChoices): the tokens with a row other than -1 take those
// experts, weighted by their probabilities there (renormalized alike); `experts` stays
// the router's own top-k and `used` holds the experts that run.
struct ExpertRouting {
  at::Tensor logits, experts, weights, used;
};
ExpertRouting route_tokens(const ModelConfig& config, const at::Tensor& router_weight, const at::Tensor& tokens,
                           const at::Tensor& replay = {});

// A sparse layer's MLP on x [..., hidden]: each token through its routed experts, weighted
// and summed; every expert's tokens in one product per projection, none dropped.
// `linear(in, name)` applies the layer's linear `name` (with its LoRA adapter when set).
// `router`: filled with the tally of the tokens `present` marks (undefined: all), when given
// (the router's own choices, replayed or not); `choices`: read and filled (ExpertChoices).
// `parallel`: the tokens' rows go to the ranks that hold their experts and their outputs
// come back (ExpertParallel); the same sums as on one rank.
at::Tensor expert_mixture(const ModelConfig& config, const LayerWeights& w, const at::Tensor& x,
                          const std::function<at::Tensor(const at::Tensor&, const std::string&)>& linear,
                          RouterTally* router = nullptr, const at::Tensor& present = {},
                          ExpertChoices* choices = nullptr, const ExpertParallel* parallel = nullptr);

// Final norm and LM head (the embedding matrix when tied); Gemma 2 soft-caps the logits.
// `tensor`: `head_weight` is this rank's vocabulary rows, the normed input enters the group.
at::Tensor lm_logits(const ModelConfig& config, const at::Tensor& norm_weight, const at::Tensor& head_weight,
                     const at::Tensor& hidden, const TensorParallel* tensor = nullptr);

}  // namespace areal
