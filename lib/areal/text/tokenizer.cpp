#include "areal/text/tokenizer.h"

#include <filesystem>

#include "areal/text/bpe_tokenizer.h"
#include "areal/text/byte_tokenizer.h"
#include "areal/util/error.h"
#include "areal/io/hf_model_dir.h"
#include "areal/util/strings.h"

namespace areal {

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path, const std::string& model_dir) {
  namespace fs = std::filesystem;
  if (path == "byte") return std::make_unique<ByteTokenizer>();
  std::string file = path;
  if (file.empty()) {
    const io::HfModelDir model(model_dir);
    if (!model.has_tokenizer()) return std::make_unique<ByteTokenizer>();
    file = model.tokenizer_json();
  } else if (fs::is_directory(file)) {
    file = io::HfModelDir(file).tokenizer_json();
  }
  if (!fs::exists(file)) throw ConfigError(cat("option 'tokenizer_path': '", file, "' does not exist"));
  return std::make_unique<BpeTokenizer>(file);
}

std::string tokenizer_folder(const std::string& path, const std::string& model_dir) {
  namespace fs = std::filesystem;
  if (path == "byte") return "";
  if (path.empty()) {
    const io::HfModelDir model(model_dir);
    return model.has_tokenizer() ? model.folder() : "";
  }
  return fs::is_directory(path) ? path : fs::path(path).parent_path().string();
}

}  // namespace areal
