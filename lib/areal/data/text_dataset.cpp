#include "areal/data/text_dataset.h"

#include <stdexcept>

#include "areal/data/builtin_tasks.h"
#include "areal/data/jsonl.h"
#include "areal/util/strings.h"

namespace areal {

TextDataset::TextDataset(const std::string& path, const std::string& prompt_key, const std::string& answer_key,
                         int64_t max_length, const Tokenizer& tokenizer, const PromptTemplate& tmpl) {
  auto add = [&](SftSequence sequence) {
    if (max_length > 0 && static_cast<int64_t>(sequence.ids.size()) > max_length) {
      ++skipped_;
      return;
    }
    sequences_.push_back(std::move(sequence));
  };
  auto append = [](std::vector<int64_t>& ids, const std::vector<int64_t>& more) { ids.insert(ids.end(), more.begin(), more.end()); };
  auto whole_text = [&](const std::string& text) {
    SftSequence s{tokenizer.prompt_prefix(), 1};
    append(s.ids, tokenizer.encode(text));
    s.ids.push_back(tokenizer.eos_id());
    return s;
  };
  auto prompt_answer = [&](const std::string& prompt, const std::string& answer, const std::string& messages = "") {
    PromptAnswer pa = prompt_answer_tokens(tmpl, tokenizer, prompt, answer, messages);
    return SftSequence{std::move(pa.ids), pa.answer_start};
  };
  if (is_builtin_task(path)) {
    for (const auto& example : builtin_task(path)) add(prompt_answer(example.prompt, example.answer));
  } else {
    for_each_jsonl_object(path, [&](const nlohmann::json& row, const std::string& where) {
      if (row.contains("text")) {
        if (!row["text"].is_string()) throw std::runtime_error(cat(where, ": field 'text' is not a string"));
        add(whole_text(row["text"].get<std::string>()));
        return;
      }
      const bool messages = row.contains(prompt_key) && row[prompt_key].is_array();  // AReaL's `messages`
      if (!row.contains(prompt_key) || !(row[prompt_key].is_string() || messages) || !row.contains(answer_key) ||
          !row[answer_key].is_string())
        throw std::runtime_error(cat(where, ": no string field 'text', nor '", prompt_key, "' (a string or a list of "
                                     "messages) and '", answer_key, "' (train_dataset.prompt_key, answer_key)"));
      try {
        add(messages ? prompt_answer("", row[answer_key].get<std::string>(),
                                     chat_messages_json(row[prompt_key], cat(where, ": field '", prompt_key, "'")))
                     : prompt_answer(row[prompt_key].get<std::string>(), row[answer_key].get<std::string>()));
      } catch (const std::exception& e) {
        if (starts_with(e.what(), where)) throw;
        throw std::runtime_error(cat(where, ": ", e.what()));
      }
    });
  }
  if (sequences_.empty()) throw std::runtime_error(cat(path, ": no usable sequences"));
}

}  // namespace areal
