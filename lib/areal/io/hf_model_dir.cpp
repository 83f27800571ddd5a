#include "areal/io/hf_model_dir.h"

#include <filesystem>

namespace areal::io {

namespace fs = std::filesystem;

HfModelDir::HfModelDir(const std::string& path) {
  names_a_file_ = !path.empty() && !fs::is_directory(path);
  folder_ = names_a_file_ ? fs::path(path).parent_path().string() : path;
}

std::string HfModelDir::file(const char* name) const { return (fs::path(folder_) / name).string(); }

bool HfModelDir::has_tokenizer() const { return !folder_.empty() && fs::exists(tokenizer_json()); }

std::vector<std::string> HfModelDir::tokenizer_files() const {
  std::vector<std::string> found;
  if (names_a_file_ || folder_.empty()) return found;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "generation_config.json", "vocab.json", "merges.txt", "chat_template.jinja",
                           "chat_template.json"})
    if (fs::exists(file(name))) found.push_back(file(name));
  return found;
}

}  // namespace areal::io
