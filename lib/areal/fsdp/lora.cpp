#include "areal/fsdp/lora.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>

#include "areal/io/safetensors.h"
#include "areal/util/error.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

const std::vector<std::string> kLinears = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

// PEFT's name of an adapter tensor: the model's module path under base_model.model.
std::string peft_name(const std::string& name) { return "base_model.model." + name; }

// adapter_config.json: a plain LoRA of actor's r and alpha, or a ConfigError saying why not.
void check_peft_config(const std::filesystem::path& file, const ActorConfig& actor) {
  nlohmann::json config;
  try {
    std::ifstream in(file);
    config = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw ConfigError(cat("option 'actor.lora_adapter_path': ", file.string(), " is not valid JSON: ", e.what()));
  }
  auto fail = [&](const std::string& why) {
    throw ConfigError(cat("option 'actor.lora_adapter_path': ", file.string(), ": ", why));
  };
  // Set to something: not absent, null, false, {} or [].
  auto truthy = [&](const char* key) { return config.contains(key) && !config[key].empty() && config[key] != false; };
  if (config.value("peft_type", "LORA") != "LORA")
    fail(cat("peft_type is ", config["peft_type"].dump(), "; only LoRA adapters can be trained here"));
  const int64_t r = config.value("r", int64_t{0}), alpha = config.value("lora_alpha", int64_t{0});
  if (r != actor.lora_rank || alpha != actor.lora_alpha)
    fail(cat("the adapter has r = ", r, " and lora_alpha = ", alpha, " but actor.lora_rank = ", actor.lora_rank,
             " and actor.lora_alpha = ", actor.lora_alpha, "; set those to the adapter's"));
  for (const char* key : {"use_rslora", "use_dora", "rank_pattern", "alpha_pattern", "modules_to_save",
                          "layers_to_transform", "layer_replication", "fan_in_fan_out", "lora_bias",
                          "trainable_token_indices"})
    if (truthy(key))
      fail(cat(key, " is ", config[key].dump(), ": only plain LoRA (scale lora_alpha / r on every adapted linear "
               "of every layer) is built here"));
  if (config.value("bias", "none") != "none")
    fail(cat("bias is ", config["bias"].dump(), ": adapters that train biases are not built here (bias: none)"));
}

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

std::vector<at::Tensor> read_peft_adapter(const std::string& dir, const ActorConfig& actor,
                                          const std::vector<UnitLayout>& units) {
  const std::filesystem::path root(dir);
  check_peft_config(root / "adapter_config.json", actor);
  const std::string file = (root / "adapter_model.safetensors").string();
  auto fail = [&](const std::string& why) {
    throw ConfigError(cat("option 'actor.lora_adapter_path': ", file, ": ", why));
  };
  std::optional<io::SafetensorsReader> opened;
  try {
    opened.emplace(file);
  } catch (const std::exception& e) {
    fail(e.what());
  }
  const io::SafetensorsReader& reader = *opened;
  std::set<std::string> unused;
  for (const auto& entry : reader.tensors()) unused.insert(entry.name);
  std::vector<at::Tensor> flats;
  for (const UnitLayout& unit : units) {
    at::Tensor flat = at::zeros({unit.padded_numel}, at::kFloat);
    for (const ParamSlot& slot : unit.params) {
      const std::string name = peft_name(slot.name);
      const io::TensorEntry* entry = reader.find(name);
      if (!entry)
        fail(cat("no tensor '", name, "': actor.target_modules (", join(actor.target_modules, ", "),
                 ") adapts this linear and the adapter does not"));
      if (entry->shape != slot.shape)
        fail(cat("tensor '", name, "' has shape ", shape_text(entry->shape), ", the base model needs ",
                 shape_text(slot.shape), " (r = ", actor.lora_rank, ")"));
      at::Tensor view = flat.narrow(0, slot.offset, slot.numel);
      reader.read_into(name, view);
      unused.erase(name);
    }
    flats.push_back(flat);
  }
  if (!unused.empty())
    fail(cat("tensor '", *unused.begin(), "' (", unused.size(), " in all) is not one this run trains: the adapter "
             "adapts modules actor.target_modules (", join(actor.target_modules, ", "), ") leaves out"));
  return flats;
}

}  // namespace areal
