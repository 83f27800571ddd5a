// The policy as the loops see the sharded model: the one part of fsdp/ that rl/ and
// rollout/ use (DESIGN.md). Four things:
//   - the train step's forward: logits with a graph whose backward leaves the
//     trainable shards' gradients (FsdpEngine, engine.h);
//   - log-probs of the KL reference: the same forward on the reference weights;
//   - the weights for the rollout, one unit at a time (unit_weights.h);
//   - saving the trained model as a Hugging Face checkpoint (save.h).
// The optimizer (optim/) updates trainable(); recover/ writes and loads shards().
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "areal/config/config.h"
#include "areal/dist/communicator.h"
#include "areal/fsdp/sharded_model.h"
#include "areal/model/functional.h"

namespace areal {

class FsdpEngine;

// "bfloat16" | "float16" | "float32" (actor.dtype, actor.grad_reduce_dtype) as a dtype.
at::ScalarType dtype_from_name(const std::string& name);

// The checks of the policy's options that the config alone decides (LoRA's target
// modules): prepare_job runs them before anything loads. Throws ConfigError.
void check_policy_options(const Config& cfg);
// The checks that need the model's config.json too (actor.router_aux_loss_coef on a
// dense model). Throws ConfigError.
void check_policy_model(const Config& cfg, const ModelConfig& model);

// The weight of a mixture of experts' load-balancing loss: actor.router_aux_loss_coef,
// or (-1) the model's own as transformers takes it (its router_aux_loss_coef when its
// config.json sets output_router_logits, else 0). 0 for a dense model.
double router_aux_loss_coef(const Config& cfg, const ModelConfig& model);


// A step's figures by name, in order (the loops' stats rows).
using NamedFigures = std::vector<std::pair<std::string, double>>;

// Which weights a forward runs on.
enum class PolicyWeights { current, reference };

// Context parallelism: this rank runs chunk `rank` of `ranks` of every sequence's tokens
// (FsdpEngine::set_context_parallel); 1 rank: the whole sequences.
struct ContextChunk {
  int64_t ranks = 1;
  int64_t rank = 0;
};

class Policy {
 public:
  // The engine make_engine (engine.h) builds from `cfg` over `model`. `cfg` must
  // outlive the policy.
  Policy(const Config& cfg, ShardedModel& model, Communicator& comm);
  ~Policy();

  const ModelConfig& config() const { return model_.config(); }
  at::ScalarType compute_dtype() const;
  Communicator& comm() { return comm_; }
  // The chunk of every sequence this rank trains on (actor.backend's c).
  ContextChunk context_chunk() const;
  // With context parallelism: the ranks that share this one's sequences by chunks (nullptr
  // without), and the ranks over which every sequence counts once (batch statistics; the
  // world without t and c; its rank and size: this rank's data-parallel group and their count).
  Communicator* context_comm();
  Communicator& data_comm();
  // Tensor parallelism (actor.backend's t): this rank's place in its group (0 without).
  // The ranks of a group compute the same losses and figures; a sum over all ranks
  // counts the first one's only.
  int64_t tensor_rank() const;
  // Whether forward()'s logits are this rank's columns of the vocabulary (t > 1); then
  // vocab_logprobs() gives the log-probs of targets (with their graph) and, when asked,
  // the entropies (no graph) over the whole vocabulary from them. Collective over the group.
  bool vocab_parallel() const;
  std::pair<at::Tensor, at::Tensor> vocab_logprobs(const at::Tensor& logits, const at::Tensor& targets,
                                                   double temperature, bool entropy) const;

  // ---- the train step ----
  // Logits [B, T, vocab] in the compute dtype. On the current weights they carry a graph
  // (when grad mode is on); a backward from them leaves trainable()'s gradients, averaged
  // over ranks. Collective: every rank calls it with its own batch. The reference needs
  // keep_reference() first.
  // `loss_share` (a train forward on the current weights): the share of the update's
  // loss that this forward's tokens carry, summed over all ranks and forwards to 1. A
  // mixture of experts tallies its routers for router_figures() and, with a
  // router_aux_loss_coef, its backward adds coef x loss_share x its load-balancing loss:
  // the update's gradient is that of the loss plus coef x the loss-weighted mean of its
  // forwards' load-balancing losses. 0: neither (scoring, the reference, padding).
  // `head_rows`: the head on those positions only (FsdpEngine::forward).
  // `experts`: a mixture of experts' choices in the rollout of these tokens [B, T, sparse
  // layers x k] (int16, -1: none; Generated::experts): a train forward counts how many
  // its routers make again (moe_route_agreement) and, with actor.router_replay, every
  // forward on the current weights routes the tokens to them (the reference never).
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& attention_mask,
                     PolicyWeights weights = PolicyWeights::current, double loss_share = 0,
                     const at::Tensor& head_rows = {}, const at::Tensor& experts = {});
  // The same with the attention inputs made by the caller (packed sequences).
  at::Tensor forward(const at::Tensor& ids, const AttentionInputs& attention,
                     PolicyWeights weights = PolicyWeights::current, double loss_share = 0,
                     const at::Tensor& head_rows = {}, const at::Tensor& experts = {});
  // A mixture of experts' routers over the train forwards since the last call, all
  // ranks: moe_aux_loss (a forward's load-balancing loss, their mean) and for each sparse
  // layer l moe_tokens_min/layer_l and moe_tokens_max/layer_l (the tokens routed to its
  // least and its most used expert), and with recorded experts moe_route_agreement (the
  // share of tokens x sparse layers whose experts in training, replayed or the router's
  // own, are the rollout's: 1 with actor.router_replay) and moe_router_agreement (whose
  // router's own top-k is the rollout's: the mismatch the replay removes). Empty for a
  // dense model. Collective.
  NamedFigures router_figures();
  // What an optimizer updates: the adapter shards with LoRA, else the base shards.
  std::vector<at::Tensor> trainable() { return model_.trainable_shards(); }
  // All-gathers so far that a forward or backward found already started ahead of it
  // (fsdp.prefetch_depth > 0); 0 at depth 0. For the step statistics.
  int64_t prefetched_gathers() const;

  // ---- the KL reference ----
  // Keeps the current weights as the reference: with LoRA the base model (adapters off,
  // nothing copied), else a frozen copy of the shards (one more shard set, 1/N of the
  // model per rank). Call it before the first update.
  void keep_reference();
  bool has_reference() const { return reference_kept_; }

  // ---- the weights for the rollout ----
  size_t unit_count() const { return model_.units().size(); }
  // Unit `u`'s weights by Hugging Face name in `dtype`, LoRA merged: the only unit whole
  // on this rank until the caller drops it. Collective, every rank in unit order.
  std::map<std::string, at::Tensor> unit_weights(size_t u, at::ScalarType dtype) const;

  // ---- saving ----
  // The trained model in `dir` (save_trained_model, save.h). Collective.
  void save(const std::string& dir) const;

  // The shards themselves, for recover checkpoints (recover/) and tests.
  ShardedModel& shards() { return model_; }

 private:
  const Config& cfg_;
  ShardedModel& model_;
  double router_aux_loss_coef_ = 0;
  bool router_replay_ = false;
  Communicator& comm_;
  std::unique_ptr<FsdpEngine> engine_;
  bool reference_kept_ = false;
  std::unique_ptr<ShardedModel> reference_model_;  // the frozen copy (no LoRA)
  std::unique_ptr<FsdpEngine> reference_engine_;
};

}  // namespace areal
