#include "areal/fsdp/policy.h"

#include <stdexcept>

#include "areal/fsdp/engine.h"
#include "areal/fsdp/lora.h"
#include "areal/fsdp/overlap.h"
#include "areal/fsdp/save.h"
#include "areal/fsdp/unit_weights.h"

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

Policy::Policy(const Config& cfg, ShardedModel& model, Communicator& comm)
    : cfg_(cfg), model_(model), comm_(comm), engine_(make_engine(cfg, model, comm)) {}

Policy::~Policy() = default;

at::ScalarType Policy::compute_dtype() const { return engine_->compute_dtype(); }

int64_t Policy::prefetched_gathers() const { return engine_->overlap().gathers_taken_started(); }

void Policy::keep_reference() {
  if (reference_kept_) return;
  if (!model_.has_adapters()) {
    reference_model_ = model_.frozen_copy();
    // No backward runs through the reference: its gradients are never reduced.
    reference_engine_ = std::make_unique<FsdpEngine>(*reference_model_, comm_, engine_->compute_dtype(), at::kFloat);
  }
  reference_kept_ = true;
}

at::Tensor Policy::forward(const at::Tensor& ids, const at::Tensor& attention_mask, PolicyWeights weights) {
  return forward(ids, attention_inputs(config(), ids, attention_mask, nullptr, compute_dtype()), weights);
}

at::Tensor Policy::forward(const at::Tensor& ids, const AttentionInputs& attention, PolicyWeights weights) {
  if (weights == PolicyWeights::current) return engine_->forward(ids, attention);
  if (!reference_kept_) throw std::logic_error("Policy::forward: no reference was kept (keep_reference)");
  FsdpEngine& engine = reference_engine_ ? *reference_engine_ : *engine_;
  // With LoRA the reference is the base model: the adapters are off for this forward
  // only (each forward keeps what it saw for its backward).
  engine.set_adapters_enabled(false);
  at::Tensor logits = engine.forward(ids, attention);
  engine.set_adapters_enabled(true);
  return logits;
}

std::map<std::string, at::Tensor> Policy::unit_weights(size_t u, at::ScalarType dtype) const {
  return gather_unit_weights(model_, comm_, u, dtype, /*merge_adapters=*/true);
}

void Policy::save(const std::string& dir) const { save_trained_model(cfg_, model_, comm_, dir); }

}  // namespace areal
