// A Hugging Face model folder as transformers writes it: config.json, the weights (one
// model.safetensors, or shards listed in model.safetensors.index.json) and the tokenizer
// files. The one place that knows those names: the staged init reads config.json through
// it, the checkpoint reader the weights, the tokenizer loader tokenizer.json, and a
// saved checkpoint copies the tokenizer files beside its weights.
#pragma once

#include <string>
#include <vector>

namespace areal::io {

class HfModelDir {
 public:
  static constexpr const char* kConfigFile = "config.json";
  static constexpr const char* kSingleWeightsFile = "model.safetensors";
  static constexpr const char* kWeightsIndexFile = "model.safetensors.index.json";
  static constexpr const char* kTokenizerFile = "tokenizer.json";
  static constexpr const char* kTokenizerConfigFile = "tokenizer_config.json";
  static constexpr const char* kGenerationConfigFile = "generation_config.json";
  static constexpr const char* kChatTemplateFile = "chat_template.jinja";
  static constexpr const char* kChatTemplateJsonFile = "chat_template.json";

  // `path`: the folder, or a single .safetensors file (its folder holds config.json).
  explicit HfModelDir(const std::string& path);

  const std::string& folder() const { return folder_; }
  bool names_a_file() const { return names_a_file_; }
  std::string file(const char* name) const;  // folder/name
  std::string config_json() const { return file(kConfigFile); }
  std::string tokenizer_json() const { return file(kTokenizerFile); }
  bool has_tokenizer() const;

  // The tokenizer, chat template and generation files a checkpoint carries beside its
  // weights (those of them that exist), copied into a saved checkpoint's folder.
  std::vector<std::string> tokenizer_files() const;

 private:
  std::string folder_;
  bool names_a_file_ = false;
};

}  // namespace areal::io
