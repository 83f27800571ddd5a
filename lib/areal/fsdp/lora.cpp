#include "areal/fsdp/lora.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>

#include "areal/util/error.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

const std::vector<std::string> kLinears = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

}  // namespace

LoraSpec lora_spec(const ActorConfig& actor) {
  LoraSpec spec;
  spec.rank = actor.lora_rank;
  spec.scale = static_cast<double>(actor.lora_alpha) / static_cast<double>(actor.lora_rank);
  for (const auto& target : actor.target_modules) {
    if (target == "all-linear") {
      spec.targets = kLinears;
      break;
    }
    if (std::find(kLinears.begin(), kLinears.end(), target) == kLinears.end())
      throw ConfigError(cat("option 'actor.target_modules': '", target, "' is not a linear layer of the model (",
                            "all-linear, ", join(kLinears, ", "), ")"));
    spec.targets.push_back(target);
  }
  return spec;
}

std::vector<UnitLayout> plan_adapter_units(const CausalLM& skeleton, const LoraSpec& spec, int world_size) {
  std::vector<UnitLayout> units(skeleton.config().num_hidden_layers);
  for (size_t i = 0; i < units.size(); ++i) units[i].name = cat("lora.layers.", i);
  for (const auto& item : skeleton.named_parameters()) {
    const std::string& name = item.key();
    if (!starts_with(name, "model.layers.") || !ends_with(name, "_proj.weight")) continue;
    const std::string module = name.substr(0, name.size() - std::string(".weight").size());
    const std::string short_name = module.substr(module.rfind('.') + 1);
    if (std::find(spec.targets.begin(), spec.targets.end(), short_name) == spec.targets.end()) continue;
    const size_t layer = std::stoul(name.substr(std::string("model.layers.").size()));
    const int64_t out = item.value().size(0), in = item.value().size(1);
    UnitLayout& u = units.at(layer);
    for (auto [suffix, shape] : {std::pair<std::string, std::vector<int64_t>>{".lora_A.weight", {spec.rank, in}},
                                 {".lora_B.weight", {out, spec.rank}}}) {
      ParamSlot slot{module + suffix, shape, u.numel, shape[0] * shape[1]};
      u.numel += slot.numel;
      u.params.push_back(std::move(slot));
    }
  }
  for (auto& u : units) {
    u.padded_numel = std::max<int64_t>(world_size, (u.numel + world_size - 1) / world_size * world_size);
    u.shard_numel = u.padded_numel / world_size;
  }
  return units;
}

at::Tensor seeded_adapter_unit(const UnitLayout& unit, size_t layer, int64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(seed) * 7919 + 104729 + layer);
  at::Tensor flat = at::zeros({unit.padded_numel}, at::kFloat);
  for (const auto& slot : unit.params)
    if (ends_with(slot.name, ".lora_A.weight")) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(slot.shape[1]));  // kaiming_uniform(a=sqrt(5))
      flat.narrow(0, slot.offset, slot.numel).uniform_(-bound, bound, gen);
    }  // lora_B stays zero
  return flat;
}

}  // namespace areal
