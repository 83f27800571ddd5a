#include "areal/data/text_dataset.h"

#include <stdexcept>

#include "areal/data/builtin_tasks.h"
#include "areal/data/dataset_files.h"
#include "areal/data/row_schema.h"
#include "areal/util/strings.h"

namespace areal {

TextDataset::TextDataset(const std::string& path, const std::string& prompt_key, const std::string& answer_key,
                         int64_t max_length, const Tokenizer& tokenizer, const PromptTemplate& tmpl,
                         const std::string& split) {
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
    for_each_dataset_row(path, split, [&](const nlohmann::json& row, const std::string& where) {
      const SftExample example = sft_example(row, where, prompt_key, answer_key);
      try {
        add(example.text.empty() ? prompt_answer(example.prompt, example.answer, example.messages_json)
                                 : whole_text(example.text));
      } catch (const std::exception& e) {
        if (starts_with(e.what(), where)) throw;
        throw std::runtime_error(cat(where, ": ", e.what()));
      }
    });
  }
  if (sequences_.empty()) throw std::runtime_error(cat(path, ": no usable sequences"));
}

}  // namespace areal
