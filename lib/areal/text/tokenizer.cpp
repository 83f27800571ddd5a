#include "areal/text/tokenizer.h"

#include <filesystem>

#include "areal/text/bpe_tokenizer.h"
#include "areal/text/byte_tokenizer.h"
#include "areal/util/error.h"
#include "areal/util/strings.h"

namespace areal {

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path, const std::string& model_dir) {
  namespace fs = std::filesystem;
  if (path == "byte") return std::make_unique<ByteTokenizer>();
  std::string file = path;
  if (file.empty()) {
    if (model_dir.empty() || !fs::exists(fs::path(model_dir) / "tokenizer.json")) return std::make_unique<ByteTokenizer>();
    file = (fs::path(model_dir) / "tokenizer.json").string();
  } else if (fs::is_directory(file)) {
    file = (fs::path(file) / "tokenizer.json").string();
  }
  if (!fs::exists(file)) throw ConfigError(cat("option 'tokenizer_path': '", file, "' does not exist"));
  return std::make_unique<BpeTokenizer>(file);
}

}  // namespace areal
