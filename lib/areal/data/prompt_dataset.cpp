#include "areal/data/prompt_dataset.h"

#include <algorithm>
#include <stdexcept>

#include "areal/data/jsonl.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

// A field as text: strings as they are, numbers (GSM8K-style answers) as JSON writes them.
std::string field_text(const nlohmann::json& row, const std::string& key, const std::string& where) {
  if (!row.contains(key)) throw std::runtime_error(cat(where, ": no field '", key, "'"));
  const auto& value = row[key];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number()) return value.dump();
  throw std::runtime_error(cat(where, ": field '", key, "' is not a string or a number"));
}

std::vector<PromptExample> read_jsonl(const std::string& path, const std::string& prompt_key,
                                      const std::string& answer_key) {
  std::vector<PromptExample> examples;
  for_each_jsonl_object(path, [&](const nlohmann::json& row, const std::string& where) {
    PromptExample example;
    if (row.contains(prompt_key) && row[prompt_key].is_array()) {
      example.messages_json = chat_messages_json(row[prompt_key], cat(where, ": field '", prompt_key, "'"));
      example.prompt = last_user_text(row[prompt_key]);
    } else {
      example.prompt = field_text(row, prompt_key, where);
    }
    example.answer = field_text(row, answer_key, where);
    example.row_json = row.dump();
    examples.push_back(std::move(example));
  });
  return examples;
}

}  // namespace

PromptDataset::PromptDataset(const std::string& path, const std::string& prompt_key, const std::string& answer_key,
                             int64_t max_length, const Tokenizer& tokenizer, const PromptTemplate& tmpl) {
  std::vector<PromptExample> examples =
      is_builtin_task(path) ? builtin_task(path) : read_jsonl(path, prompt_key, answer_key);
  for (auto& example : examples) {
    std::vector<int64_t> ids;
    try {
      ids = prompt_tokens(tmpl, tokenizer, example.prompt, example.messages_json);
    } catch (const std::exception& e) {
      throw std::runtime_error(cat(path, ": prompt ", prompts_.size() + skipped_ + 1, ": ", e.what()));
    }
    if (max_length > 0 && static_cast<int64_t>(ids.size()) > max_length) {
      ++skipped_;
      continue;
    }
    prompts_.push_back({std::move(example), std::move(ids)});
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
