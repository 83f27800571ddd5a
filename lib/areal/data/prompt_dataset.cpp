#include "areal/data/prompt_dataset.h"

#include <algorithm>
#include <stdexcept>

#include "areal/data/dataset_files.h"
#include "areal/data/row_schema.h"
#include "areal/util/strings.h"

namespace areal {

PromptDataset::PromptDataset(const std::string& path, const std::string& prompt_key, const std::string& answer_key,
                             int64_t max_length, const Tokenizer& tokenizer, const PromptTemplate& tmpl,
                             const std::string& split) {
  auto add = [&](PromptExample example) {
    std::vector<int64_t> ids;
    try {
      ids = prompt_tokens(tmpl, tokenizer, example.prompt, example.messages_json);
    } catch (const std::exception& e) {
      throw std::runtime_error(cat(path, ": prompt ", prompts_.size() + skipped_ + 1, ": ", e.what()));
    }
    if (max_length > 0 && static_cast<int64_t>(ids.size()) > max_length) {
      ++skipped_;
      return;
    }
    prompts_.push_back({std::move(example), std::move(ids)});
  };
  if (is_builtin_task(path)) {
    for (PromptExample& example : builtin_task(path)) add(std::move(example));
  } else {
    for_each_dataset_row(path, split, [&](const nlohmann::json& row, const std::string& where) {
      add(rl_example(row, where, prompt_key, answer_key));
    });
  }
  if (prompts_.empty())
    throw std::runtime_error(cat(path, ": no usable prompts (", skipped_, " longer than max_length)"));
}

int64_t longest_prompt(const PromptDataset& data) {
  int64_t longest = 0;
  for (size_t i = 0; i < data.size(); ++i) longest = std::max<int64_t>(longest, data[i].ids.size());
  return longest;
}

}  // namespace areal
