#include "areal/fsdp/unit_layout.h"

#include "areal/util/strings.h"

namespace areal {

std::vector<UnitLayout> plan_units(const CausalLM& skeleton, int world_size) {
  const int64_t layers = skeleton.config().num_hidden_layers;
  const bool tied = skeleton.config().tie_word_embeddings;
  std::vector<UnitLayout> units(1 + layers + (tied ? 0 : 1));
  units[0].name = tied ? "root" : "embed";
  for (int64_t i = 0; i < layers; ++i) units[1 + i].name = cat("layers.", i);
  if (!tied) units.back().name = "head";

  for (const auto& item : skeleton.named_parameters()) {
    const std::string& name = item.key();
    size_t unit = 0;
    if (starts_with(name, "model.layers.")) {
      std::string rest = name.substr(std::string("model.layers.").size());
      unit = 1 + std::stoul(rest.substr(0, rest.find('.')));
    } else if (!tied && name != "model.embed_tokens.weight") {
      unit = units.size() - 1;  // model.norm.weight, lm_head.weight
    }
    UnitLayout& u = units.at(unit);
    ParamSlot slot{name, item.value().sizes().vec(), u.numel, item.value().numel()};
    u.numel += slot.numel;
    u.params.push_back(std::move(slot));
  }
  for (auto& u : units) {
    u.padded_numel = (u.numel + world_size - 1) / world_size * world_size;
    u.shard_numel = u.padded_numel / world_size;
  }
  return units;
}

}  // namespace areal
