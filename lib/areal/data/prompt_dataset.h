// The prompts of an RL run with their reference answers: a dataset (dataset_files.h:
// JSONL, parquet, Arrow, Hugging Face downloads and save_to_disk folders; the fields
// as row_schema.h recognises them) or a built-in task (builtin_tasks.h). Prompts are tokenized once through the chat template; prompts
// longer than max_length tokens are skipped and counted.
#pragma once

#include <string>
#include <vector>

#include "areal/data/builtin_tasks.h"
#include "areal/text/chat_template.h"

namespace areal {

struct Prompt {
  PromptExample example;
  std::vector<int64_t> ids;  // the prompt's tokens, template applied
};

class PromptDataset {
 public:
  // Throws std::runtime_error naming the file and row for unreadable rows. `split`
  // picks the split of a folder.
  PromptDataset(const std::string& path, const std::string& prompt_key, const std::string& answer_key,
                int64_t max_length, const Tokenizer& tokenizer, const PromptTemplate& tmpl,
                const std::string& split = "train");

  size_t size() const { return prompts_.size(); }
  int64_t skipped() const { return skipped_; }
  const Prompt& operator[](size_t i) const { return prompts_.at(i); }

 private:
  std::vector<Prompt> prompts_;
  int64_t skipped_ = 0;
};

// The most tokens a prompt of `data` has (the memory checks, the generation stream's rows).
int64_t longest_prompt(const PromptDataset& data);

}  // namespace areal
