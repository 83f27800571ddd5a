#include "areal/data/prompt_dataset.h"

#include <algorithm>
#include <stdexcept>

#include "areal/data/dataset_files.h"
#include "areal/data/row_schema.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

std::vector<char> record_of(const PromptExample& e, const std::vector<int64_t>& ids) {
  ByteWriter w;
  w.put_string(e.prompt);
  w.put_string(e.answer);
  w.put_string(e.row_json);
  w.put_string(e.messages_json);
  put_token_ids(w, ids);
  return w.take();
}

}  // namespace

PromptDataset::PromptDataset(const std::string& path, const std::string& prompt_key, const std::string& answer_key,
                             int64_t max_length, const Tokenizer& tokenizer, const PromptTemplate& tmpl,
                             const std::string& split, bool keep_rows) {
  auto add = [&](PromptExample example) {
    if (!keep_rows) example.row_json.clear();  // the reward sees {"answer": ...} then, as for built-in tasks
    std::vector<int64_t> ids;
    try {
      ids = prompt_tokens(tmpl, tokenizer, example.prompt, example.messages_json);
    } catch (const std::exception& e) {
      throw std::runtime_error(cat(path, ": prompt ", size() + skipped_ + 1, ": ", e.what()));
    }
    if (max_length > 0 && static_cast<int64_t>(ids.size()) > max_length) {
      ++skipped_;
      return;
    }
    longest_ = std::max<int64_t>(longest_, static_cast<int64_t>(ids.size()));
    rows_.append(record_of(example, ids));
  };
  if (is_builtin_task(path)) {
    for (PromptExample& example : builtin_task(path)) add(std::move(example));
  } else {
    for_each_dataset_row(path, split, [&](const nlohmann::json& row, const std::string& where) {
      add(rl_example(row, where, prompt_key, answer_key));
    });
  }
  if (size() == 0)
    throw std::runtime_error(cat(path, ": no usable prompts (", skipped_, " longer than max_length)"));
}

Prompt PromptDataset::operator[](size_t i) const {
  const std::vector<char> record = rows_.read(i);
  ByteReader r(record);
  Prompt p;
  p.example.prompt = r.get_string();
  p.example.answer = r.get_string();
  p.example.row_json = r.get_string();
  p.example.messages_json = r.get_string();
  p.ids = get_token_ids(r);
  return p;
}

}  // namespace areal
