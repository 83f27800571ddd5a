// The prompts of an RL run with their reference answers: a dataset (dataset_files.h:
// JSONL, parquet, Arrow, Hugging Face downloads and save_to_disk folders; the fields
// as row_schema.h recognises them) or a built-in task (builtin_tasks.h). Prompts are
// tokenized once through the chat template; prompts longer than max_length tokens are
// skipped and counted. The rows live on disk (record_store.h): a prompt is read back
// when a step asks for it, so a large dataset does not fill every rank's memory.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "areal/data/builtin_tasks.h"
#include "areal/data/record_store.h"
#include "areal/text/chat_template.h"

namespace areal {

struct Prompt {
  PromptExample example;
  std::vector<int64_t> ids;  // the prompt's tokens, template applied
};
// A prompt read from the dataset, held as long as a step needs it (its example is what
// a reward call points at).
using SharedPrompt = std::shared_ptr<const Prompt>;

class PromptDataset {
 public:
  // Throws std::runtime_error naming the file and row for unreadable rows. `split`
  // picks the split of a folder. `keep_rows`: keep each row's JSON (example.row_json)
  // for a command reward or environment; without one only the prompt and answer matter.
  PromptDataset(const std::string& path, const std::string& prompt_key, const std::string& answer_key,
                int64_t max_length, const Tokenizer& tokenizer, const PromptTemplate& tmpl,
                const std::string& split = "train", bool keep_rows = true);

  size_t size() const { return rows_.size(); }
  int64_t skipped() const { return skipped_; }
  Prompt operator[](size_t i) const;  // reads the row back; thread-safe
  SharedPrompt shared(size_t i) const { return std::make_shared<const Prompt>((*this)[i]); }
  // The most tokens a prompt has (the memory checks, the generation stream's rows).
  int64_t longest() const { return longest_; }
  uint64_t bytes_on_disk() const { return rows_.bytes(); }

 private:
  RecordStore rows_;
  int64_t skipped_ = 0;
  int64_t longest_ = 0;
};

inline int64_t longest_prompt(const PromptDataset& data) { return data.longest(); }

}  // namespace areal
