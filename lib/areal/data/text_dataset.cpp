#include "areal/data/text_dataset.h"

#include <algorithm>
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
    longest_ = std::max(longest_, static_cast<int64_t>(sequence.ids.size()));
    ByteWriter w;
    put_token_ids(w, sequence.ids);
    std::vector<int64_t> spans;
    for (const auto& [begin, end] : sequence.loss_spans) spans.insert(spans.end(), {begin, end});
    w.put_vector(spans);
    rows_.append(w.take());
  };
  auto append = [](std::vector<int64_t>& ids, const std::vector<int64_t>& more) { ids.insert(ids.end(), more.begin(), more.end()); };
  auto whole_text = [&](const std::string& text) {
    SftSequence s{tokenizer.prompt_prefix(), {}};
    append(s.ids, tokenizer.encode(text));
    s.ids.push_back(tokenizer.eos_id());
    s.loss_spans = {{1, static_cast<int64_t>(s.ids.size())}};
    return s;
  };
  auto prompt_answer = [&](const std::string& prompt, const std::string& answer, const std::string& messages = "") {
    PromptAnswer pa = prompt_answer_tokens(tmpl, tokenizer, prompt, answer, messages);
    const int64_t end = static_cast<int64_t>(pa.ids.size());
    return SftSequence{std::move(pa.ids), {{pa.answer_start, end}}};
  };
  auto conversation = [&](const std::string& messages) {
    ConversationTokens c = conversation_tokens(tmpl, tokenizer, messages);
    return SftSequence{std::move(c.ids), std::move(c.assistant_spans)};
  };
  if (is_builtin_task(path)) {
    for (const auto& example : builtin_task(path)) add(prompt_answer(example.prompt, example.answer));
  } else {
    for_each_dataset_row(path, split, [&](const nlohmann::json& row, const std::string& where) {
      const SftExample example = sft_example(row, where, prompt_key, answer_key);
      try {
        if (!example.conversation_json.empty()) add(conversation(example.conversation_json));
        else if (!example.text.empty()) add(whole_text(example.text));
        else add(prompt_answer(example.prompt, example.answer, example.messages_json));
      } catch (const std::exception& e) {
        if (starts_with(e.what(), where)) throw;
        throw std::runtime_error(cat(where, ": ", e.what()));
      }
    });
  }
  if (size() == 0) throw std::runtime_error(cat(path, ": no usable sequences"));
}

SftSequence TextDataset::sequence(size_t i) const {
  const std::vector<char> record = rows_.read(i);
  ByteReader r(record);
  SftSequence s;
  s.ids = get_token_ids(r);
  const std::vector<int64_t> spans = r.get_vector<int64_t>();
  for (size_t k = 0; k + 1 < spans.size(); k += 2) s.loss_spans.emplace_back(spans[k], spans[k + 1]);
  return s;
}

}  // namespace areal
