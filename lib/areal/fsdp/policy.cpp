#include "areal/fsdp/policy.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>

#include "areal/config/allocation.h"
#include "areal/fsdp/context_parallel.h"
#include "areal/fsdp/engine.h"
#include "areal/fsdp/lora.h"
#include "areal/fsdp/overlap.h"
#include "areal/fsdp/save.h"
#include "areal/fsdp/tensor_parallel.h"
#include "areal/fsdp/unit_weights.h"
#include "areal/model/tensor_slices.h"
#include "areal/util/error.h"
#include "areal/util/strings.h"

namespace areal {

at::ScalarType dtype_from_name(const std::string& name) {
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  if (name == "float32") return at::kFloat;
  throw std::invalid_argument("unknown dtype name '" + name + "' (bfloat16, float16, float32)");
}

void check_policy_options(const Config& cfg) {
  if (cfg.actor.use_lora) lora_spec(cfg.actor);  // unknown target modules
}

void check_policy_model(const Config& cfg, const ModelConfig& model) {
  if (model.num_experts == 0 && cfg.actor.router_aux_loss_coef >= 0)
    throw ConfigError(cat("option 'actor.router_aux_loss_coef' = ", cfg.actor.router_aux_loss_coef, ": the model (",
                          model.model_type, ", ", cfg.model_path, ") is dense and has no router; leave it unset (-1)"));
  if (model.num_experts == 0 && cfg.actor.router_replay)
    throw ConfigError(cat("option 'actor.router_replay' = true: the model (", model.model_type, ", ", cfg.model_path,
                          ") is dense and has no router to replay"));
  const Allocation allocation = parse_allocation(cfg);
  const int64_t expert_ranks = allocation.actor.expert;
  if (expert_ranks > 1 && model.num_experts == 0)
    throw ConfigError(cat("option 'actor.backend': expert parallelism (e", expert_ranks, ") needs a mixture of experts; "
                          "the model (", model.model_type, ", ", cfg.model_path, ") is dense (use e1)"));
  // Tensor (t) and context (c) parallelism: the ranks of a data-parallel group share its rows.
  const int64_t tensor_ranks = allocation.actor.tensor, sequence_ranks = allocation.actor.context;
  auto check_sharing = [&](const std::string& what) {
    auto refuse = [&](const std::string& why) { throw ConfigError(cat("option 'actor.backend': ", what, " ", why)); };
    if (cfg.job != "sft" && cfg.job != "rl")
      refuse(cat("is built for job=sft and job=rl (job=", cfg.job, " trains nothing: use t1c1)"));
    if (cfg.job == "rl") {  // what is built: colocated, each rank generating alone, plain GRPO-family steps
      if (!cfg.rollout.backend.empty() && allocation.rollout.tensor != 1)
        refuse("in job=rl generates with every rank alone: use a rollout.backend with t1");
      if (cfg.actor.dynamic_sampling) refuse("is not built with actor.dynamic_sampling");
      if (cfg.actor.importance_sampling_level == "sequence") refuse("is not built with GSPO's sequence-level ratio");
      if (!cfg.env.empty()) refuse("is not built with multi-turn episodes (env)");
    }
    if (model.num_experts > 0) refuse("is not built for a mixture of experts");
  };
  const int64_t heads = model.num_attention_heads, kv = model.num_key_value_heads;
  if (tensor_ranks > 1) {
    const std::string what = cat("tensor parallelism (t", tensor_ranks, ")");
    check_sharing(what);
    if (!tensor_parallel_splits(model, tensor_ranks))
      throw ConfigError(cat("option 'actor.backend': ", what, " splits the attention heads and the MLP: the model's ",
                            heads, " heads, ", kv, " key/value heads and ", model.intermediate_size,
                            " MLP channels (", cfg.model_path, ") need a t that divides the heads and the channels "
                            "and divides or is a multiple of the key/value heads"));
  }
  if (sequence_ranks > 1) {
    const std::string what = cat("context parallelism (c", sequence_ranks, ")");
    check_sharing(what);
    // With t the group splits each rank's heads.
    const int64_t local_heads = heads / tensor_ranks, local_kv = std::max<int64_t>(1, kv / tensor_ranks);
    if (local_heads % sequence_ranks != 0 || (local_kv % sequence_ranks != 0 && sequence_ranks % local_kv != 0))
      throw ConfigError(cat("option 'actor.backend': ", what, " splits the attention heads over the group: the model's ",
                            heads, " heads and ", kv, " key/value heads (", cfg.model_path, ")",
                            tensor_ranks > 1 ? cat(", ", local_heads, " and ", local_kv, " per rank at t", tensor_ranks)
                                             : std::string(),
                            " need a c that divides the heads and divides or is a multiple of the key/value heads"));
  }
  if (expert_ranks > 1 && model.num_experts % expert_ranks != 0)
    throw ConfigError(cat("option 'actor.backend': the model's ", model.num_experts, " experts (", cfg.model_path,
                          ") do not divide over groups of ", expert_ranks, " ranks (e", expert_ranks,
                          "); use an e that divides ", model.num_experts));
}


double router_aux_loss_coef(const Config& cfg, const ModelConfig& model) {
  if (model.num_experts == 0) return 0;
  if (cfg.actor.router_aux_loss_coef >= 0) return cfg.actor.router_aux_loss_coef;
  return model.output_router_logits ? model.router_aux_loss_coef : 0;
}

Policy::Policy(const Config& cfg, ShardedModel& model, Communicator& comm)
    : cfg_(cfg),
      model_(model),
      router_aux_loss_coef_(router_aux_loss_coef(cfg, model.config())),
      router_replay_(cfg.actor.router_replay),
      comm_(comm),
      engine_(make_engine(cfg, model, comm)) {}

Policy::~Policy() = default;

Communicator* Policy::context_comm() {
  ContextParallelism* context = engine_->context_parallelism();
  return context ? &context->group() : nullptr;
}

Communicator& Policy::data_comm() {
  if (ContextParallelism* context = engine_->context_parallelism()) return context->data_group();
  if (TensorParallelism* tensor = engine_->tensor_parallelism()) return tensor->data_group();
  return comm_;
}

int64_t Policy::tensor_rank() const {
  const TensorParallelism* tensor = engine_->tensor_parallelism();
  return tensor ? tensor->rank() : 0;
}

bool Policy::vocab_parallel() const { return engine_->tensor_parallelism() != nullptr; }

std::pair<at::Tensor, at::Tensor> Policy::vocab_logprobs(const at::Tensor& logits, const at::Tensor& targets,
                                                         double temperature, bool entropy) const {
  const TensorParallelism* tensor = engine_->tensor_parallelism();
  if (!tensor) throw std::logic_error("Policy::vocab_logprobs: the logits are whole (no tensor parallelism)");
  VocabLogprobs out = vocab_parallel_logprobs(*tensor, logits, targets, temperature, entropy);
  return {out.logprobs, out.entropy};
}

ContextChunk Policy::context_chunk() const {
  const ContextParallelism* context = engine_->context_parallelism();
  return context ? ContextChunk{context->degree(), context->rank()} : ContextChunk{};
}

at::ScalarType Policy::compute_dtype() const { return engine_->compute_dtype(); }

int64_t Policy::prefetched_gathers() const { return engine_->overlap().gathers_taken_started(); }

void Policy::keep_reference() {
  if (reference_kept_) return;
  if (!model_.has_adapters()) {
    reference_model_ = model_.frozen_copy();
    // No backward runs through the reference: its gradients are never reduced.
    reference_engine_ = std::make_unique<FsdpEngine>(*reference_model_, comm_, engine_->compute_dtype(), at::kFloat);
    reference_engine_->share_parallel_groups(*engine_);
  }
  reference_kept_ = true;
}

at::Tensor Policy::forward(const at::Tensor& ids, const at::Tensor& attention_mask, PolicyWeights weights,
                           double loss_share, const at::Tensor& head_rows, const at::Tensor& experts) {
  return forward(ids, attention_inputs(config(), ids, attention_mask, nullptr, compute_dtype()), weights, loss_share,
                 head_rows, experts);
}

at::Tensor Policy::forward(const at::Tensor& ids, const AttentionInputs& attention, PolicyWeights weights,
                           double loss_share, const at::Tensor& head_rows, const at::Tensor& experts) {
  if (weights == PolicyWeights::current) {
    RouterLoss router;
    router.tally = loss_share > 0;
    // The engine averages gradients over ranks: world_size undoes it for the aux term too.
    router.weight = router_aux_loss_coef_ * loss_share * static_cast<double>(comm_.world_size());
    router.experts = experts;
    router.replay = router_replay_ && experts.defined();
    return engine_->forward(ids, attention, router, head_rows);
  }
  if (!reference_kept_) throw std::logic_error("Policy::forward: no reference was kept (keep_reference)");
  FsdpEngine& engine = reference_engine_ ? *reference_engine_ : *engine_;
  // With LoRA the reference is the base model: the adapters are off for this forward
  // only (each forward keeps what it saw for its backward).
  engine.set_adapters_enabled(false);
  at::Tensor logits = engine.forward(ids, attention, {}, head_rows);
  engine.set_adapters_enabled(true);
  return logits;
}

NamedFigures Policy::router_figures() {
  const ModelConfig& c = config();
  if (c.num_experts == 0) return {};
  const int64_t sparse = c.sparse_layer_count();
  const RouterStats s = engine_->take_router_stats();
  // [forwards, aux sum, recorded routes, agreeing routes, the router's own agreeing routes,
  // expert tokens...] summed over ranks (a rank without forwards adds zeros).
  at::Tensor sums = at::zeros({5 + sparse * c.num_experts}, at::kDouble);
  if (s.forwards > 0) {
    sums[0] = static_cast<double>(s.forwards);
    sums[1] = s.aux_loss_sum.cpu();
    if (s.recorded_routes.defined()) {
      sums[2] = s.recorded_routes.cpu();
      sums[3] = s.agreeing_routes.cpu();
      sums[4] = s.router_agreeing_routes.cpu();
    }
    sums.narrow(0, 5, sparse * c.num_experts).copy_(s.expert_tokens.reshape({-1}).cpu());
  }
  comm_.all_reduce(sums, ReduceOp::Sum);
  const double forwards = sums[0].item<double>();
  if (forwards == 0) return {};
  NamedFigures figures = {{"moe_aux_loss", sums[1].item<double>() / forwards}};
  if (const double recorded = sums[2].item<double>(); recorded > 0) {
    figures.push_back({"moe_route_agreement", sums[3].item<double>() / recorded});
    figures.push_back({"moe_router_agreement", sums[4].item<double>() / recorded});
  }
  const at::Tensor tokens = sums.narrow(0, 5, sparse * c.num_experts).view({sparse, c.num_experts});
  for (int64_t l = 0, i = 0; l < c.num_hidden_layers; ++l) {
    if (!c.layer_is_sparse(l)) continue;
    figures.push_back({cat("moe_tokens_min/layer_", l), tokens[i].min().item<double>()});
    figures.push_back({cat("moe_tokens_max/layer_", l), tokens[i].max().item<double>()});
    ++i;
  }
  return figures;
}

std::map<std::string, at::Tensor> Policy::unit_weights(size_t u, at::ScalarType dtype) const {
  return gather_unit_weights(model_, comm_, u, dtype, /*merge_adapters=*/true);
}

void Policy::save(const std::string& dir) const { save_trained_model(cfg_, model_, comm_, dir); }

}  // namespace areal
