#include "areal/rl/text_dataset.h"

#include <stdexcept>

#include "areal/rl/builtin_tasks.h"
#include "areal/rl/byte_tokenizer.h"
#include "areal/rl/jsonl.h"
#include "areal/util/strings.h"

namespace areal {

TextDataset::TextDataset(const std::string& path, const std::string& key, int64_t max_length) {
  ByteTokenizer tokenizer;
  auto add = [&](const std::string& text) {
    std::vector<int64_t> ids = tokenizer.encode_document(text);
    if (max_length > 0 && static_cast<int64_t>(ids.size()) > max_length) {
      ++skipped_;
      return;
    }
    sequences_.push_back(std::move(ids));
  };
  if (is_builtin_task(path)) {
    // A generated task: each text is the prompt followed by its reference answer.
    for (const auto& example : builtin_task(path)) add(example.prompt + example.answer);
  } else {
    for_each_jsonl_object(path, [&](const nlohmann::json& row, const std::string& where) {
      if (!row.contains(key) || !row[key].is_string())
        throw std::runtime_error(cat(where, ": no string field '", key, "'"));
      add(row[key].get<std::string>());
    });
  }
  if (sequences_.empty()) throw std::runtime_error(cat(path, ": no usable sequences"));
}

}  // namespace areal
