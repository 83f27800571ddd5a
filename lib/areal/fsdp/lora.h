// LoRA adapters on the sharded model: for each targeted linear of each decoder layer,
// lora_A [rank, in] and lora_B [out, rank]; the layer computes
// W x + b + (alpha / rank) * B (A x). The adapters of one layer form one adapter unit,
// sharded like the base units; the base shards are frozen (no gradient, no optimizer
// state) and only the adapter shards train.
#pragma once

#include <string>
#include <vector>

#include "areal/config/config.h"
#include "areal/fsdp/unit_layout.h"
#include "areal/model/transformer.h"

namespace areal {

struct LoraSpec {
  int64_t rank = 0;
  double scale = 0;                  // alpha / rank
  std::vector<std::string> targets;  // short names: q_proj, k_proj, ..., down_proj
};

// From actor.lora_rank, lora_alpha and target_modules ("all-linear": every linear of
// the decoder layers, as PEFT does, the LM head excluded). Throws ConfigError for an
// unknown module name.
LoraSpec lora_spec(const ActorConfig& actor);

// One adapter unit per decoder layer, in layer order.
std::vector<UnitLayout> plan_adapter_units(const CausalLM& skeleton, const LoraSpec& spec, int world_size);

// An adapter unit as PEFT initializes it: A kaiming-uniform (bound 1/sqrt(in)), B zero,
// so the adapted model starts equal to the base. A function of the seed and the layer.
at::Tensor seeded_adapter_unit(const UnitLayout& unit, size_t layer, int64_t seed);

// The adapter units read from a PEFT adapter directory (actor.lora_adapter_path:
// adapter_config.json + adapter_model.safetensors, as PEFT's save_pretrained and this
// trainer's checkpoints write them), one full flat buffer per unit (adapters are small).
// Checked against `actor` and `units` (the base model's shapes): a LoRA adapter with
// the same r and lora_alpha, none of the PEFT variants computed differently (rsLoRA,
// DoRA, per-module ranks, trained biases or extra modules), every tensor the units hold
// present with its shape, and no other. Throws ConfigError naming the file and what
// differs.
std::vector<at::Tensor> read_peft_adapter(const std::string& dir, const ActorConfig& actor,
                                          const std::vector<UnitLayout>& units);

}  // namespace areal
