#include "areal/fsdp/save.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "areal/fsdp/lora.h"
#include "areal/fsdp/unit_weights.h"
#include "areal/io/checkpoint.h"
#include "areal/io/hf_model_dir.h"

namespace areal {

void save_sharded_checkpoint(const ShardedModel& model, Communicator& comm, const std::string& dir,
                             at::ScalarType dtype, uint64_t max_shard_bytes, bool merge_adapters,
                             const std::function<void(const std::string&)>& extra_files) {
  const auto& units = model.units();
  if (comm.rank() != 0) {
    // Follow rank 0's gathers in the same order; rank 0 writes.
    for (size_t u = 0; u < units.size(); ++u) gather_unit_weights(model, comm, u, dtype, merge_adapters);
    comm.barrier();
    return;
  }
  std::vector<io::TensorSpec> specs;
  std::map<std::string, size_t> unit_of;
  for (size_t u = 0; u < units.size(); ++u)
    for (const auto& slot : units[u].params) {
      specs.push_back({slot.name, io::from_scalar_type(dtype), slot.shape});
      unit_of[slot.name] = u;
    }
  // The writer asks for tensors in spec order, i.e. unit by unit: gather a unit when
  // its first tensor is asked for, and drop the previous one.
  size_t gathered = units.size();
  std::map<std::string, at::Tensor> views;
  io::write_checkpoint(
      dir, model.config().json_text, specs,
      [&](const io::TensorSpec& spec) {
        const size_t u = unit_of.at(spec.name);
        if (u != gathered) {
          views = gather_unit_weights(model, comm, u, dtype, merge_adapters);
          gathered = u;
        }
        return views.at(spec.name);
      },
      max_shard_bytes, extra_files);
  comm.barrier();
}

namespace {

// Every LoRA adapter tensor under its PEFT name (`base_model.model.<name>`), gathered on
// every rank. Collective; adapters are small, so all of them at once.
std::vector<std::pair<std::string, at::Tensor>> gather_lora_adapters(const ShardedModel& model, Communicator& comm) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (size_t layer = 0; layer < model.adapter_units().size(); ++layer) {
    at::Tensor flat = model.gather_adapter(layer, comm, at::kFloat);
    for (auto& [name, view] : model.adapter_views(layer, flat)) tensors.emplace_back("base_model.model." + name, view);
  }
  return tensors;
}

// PEFT's layout in `dir`: adapter_model.safetensors and adapter_config.json.
void write_lora_adapters(const std::vector<std::pair<std::string, at::Tensor>>& tensors, const ActorConfig& actor,
                         const std::string& dir) {
  io::write_safetensors((std::filesystem::path(dir) / "adapter_model.safetensors").string(), tensors, {{"format", "pt"}});
  const std::vector<std::string> targets = lora_spec(actor).targets;  // "all-linear" spelled out
  nlohmann::ordered_json config = {{"peft_type", "LORA"},        {"task_type", "CAUSAL_LM"},
                                   {"r", actor.lora_rank},       {"lora_alpha", actor.lora_alpha},
                                   {"lora_dropout", 0.0},        {"bias", "none"},
                                   {"target_modules", targets},  {"fan_in_fan_out", false},
                                   {"inference_mode", true},     {"base_model_name_or_path", dir}};
  std::ofstream out(std::filesystem::path(dir) / "adapter_config.json");
  out << config.dump(2) << "\n";
  if (!out.flush()) throw io::CheckpointError(dir + "/adapter_config.json: write failed");
}

}  // namespace

void save_trained_model(const Config& cfg, const ShardedModel& model, Communicator& comm, const std::string& dir) {
  namespace fs = std::filesystem;
  // Everything of the checkpoint goes into its temporary directory before the swap
  // (io::write_checkpoint), so a crash never leaves weights without their adapters or
  // tokenizer under the final name.
  std::vector<std::pair<std::string, at::Tensor>> adapters;
  if (model.has_adapters()) adapters = gather_lora_adapters(model, comm);
  auto extra_files = [&](const std::string& temp_dir) {
    if (model.has_adapters()) write_lora_adapters(adapters, cfg.actor, temp_dir);
    for (const std::string& file : io::HfModelDir(cfg.model_path).tokenizer_files())
      fs::copy_file(file, fs::path(temp_dir) / fs::path(file).filename());
  };
  save_sharded_checkpoint(model, comm, dir, at::kFloat, uint64_t{5} << 30, /*merge_adapters=*/false, extra_files);
  if (model.has_adapters() && cfg.saver.merge_lora)
    save_sharded_checkpoint(model, comm, dir + "-merged", at::kFloat, uint64_t{5} << 30, /*merge_adapters=*/true);
}

}  // namespace areal
