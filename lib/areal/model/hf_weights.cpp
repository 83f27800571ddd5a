#include "areal/model/hf_weights.h"

#include <ATen/ATen.h>

#include <set>

#include "areal/util/strings.h"

namespace areal {
namespace {


}  // namespace

void check_hf_weights(const CausalLM& model, const io::CheckpointReader& checkpoint) {
  std::set<std::string> expected;
  for (const auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    expected.insert(name);
    if (!checkpoint.contains(name))
      throw io::CheckpointError(cat(checkpoint.config_path(), ": the checkpoint has no tensor '", name,
                                    "', which the model (", model.config().model_type, ") needs"));
    const io::TensorEntry& entry = checkpoint.entry(name);
    if (at::IntArrayRef(entry.shape) != item.value().sizes())
      throw io::CheckpointError(cat(checkpoint.file_of(name), ": tensor '", name, "' has shape ",
                                    shape_text(entry.shape), " but config.json implies ",
                                    shape_text(item.value().sizes().vec())));
  }
  for (const auto& name : checkpoint.names()) {
    if (expected.count(name)) continue;
    if (name == "lm_head.weight" && model.config().tie_word_embeddings) continue;  // tied: the embedding serves
    throw io::CheckpointError(cat(checkpoint.file_of(name), ": unexpected tensor '", name, "' (not a parameter of a ",
                                  model.config().model_type, " model with this config.json)"));
  }
}

void load_hf_weights(CausalLM& model, const io::CheckpointReader& checkpoint) {
  check_hf_weights(model, checkpoint);
  at::NoGradGuard no_grad;
  for (auto& item : model.named_parameters()) {
    at::Tensor param = item.value();
    checkpoint.read_into(item.key(), param);
  }
}

std::shared_ptr<CausalLM> load_causal_lm(const std::string& path, at::ScalarType dtype) {
  io::CheckpointReader checkpoint(path);
  ModelConfig config = ModelConfig::from_file(checkpoint.config_path());
  auto model = std::make_shared<CausalLM>(config, at::TensorOptions().dtype(dtype));
  load_hf_weights(*model, checkpoint);
  return model;
}

void save_hf_checkpoint(const CausalLM& model, const std::string& dir, uint64_t max_shard_bytes) {
  std::vector<io::TensorSpec> specs;
  std::map<std::string, at::Tensor> params;
  for (const auto& item : model.named_parameters()) {
    specs.push_back({item.key(), io::from_scalar_type(item.value().scalar_type()), item.value().sizes().vec()});
    params[item.key()] = item.value();
  }
  io::write_checkpoint(dir, model.config().json_text, specs,
                       [&](const io::TensorSpec& spec) { return params.at(spec.name).detach(); }, max_shard_bytes);
}

}  // namespace areal
