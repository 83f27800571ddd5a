// The data of supervised fine-tuning, tokenized once with the model's tokenizer
// (the byte tokenizer only when asked for or when the model has none). Rows of a
// dataset (dataset_files.h) are, by their fields (row_schema.h), either
//   {"text": ...}                  the whole text is trained on: prefix + text + EOS
//   a prompt and an answer         AReaL's SFT shape (prompt_key/answer_key, GSM8K's
//                                  question/answer, MATH's problem/solution, a chat's
//                                  messages and its last assistant turn): the prompt
//                                  through the chat template, then the answer and the
//                                  end-of-turn token; the loss covers the answer only
//   a conversation                 `messages` with several assistant turns: the whole
//                                  of it through the model's template, the loss on
//                                  every assistant turn (chat_template.h)
// A built-in task (builtin_tasks.h) gives prompt/answer rows. Sequences
// longer than max_length tokens are skipped and counted. The sequences live on disk
// (record_store.h) and are read back when a step asks for them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "areal/data/record_store.h"
#include "areal/text/chat_template.h"
#include "areal/text/tokenizer.h"

namespace areal {

struct SftSequence {
  std::vector<int64_t> ids;
  std::vector<std::pair<int64_t, int64_t>> loss_spans;  // tokens [begin, end) are predicted with a loss
};

class TextDataset {
 public:
  // Throws std::runtime_error naming the file and row for unreadable input. `split`
  // picks the split of a folder.
  TextDataset(const std::string& path, const std::string& prompt_key, const std::string& answer_key,
              int64_t max_length, const Tokenizer& tokenizer, const PromptTemplate& tmpl,
              const std::string& split = "train");

  size_t size() const { return rows_.size(); }
  int64_t skipped() const { return skipped_; }
  int64_t longest() const { return longest_; }  // tokens of the longest sequence kept
  SftSequence sequence(size_t i) const;  // reads the row back
  uint64_t bytes_on_disk() const { return rows_.bytes(); }

 private:
  RecordStore rows_;
  int64_t skipped_ = 0;
  int64_t longest_ = 0;
};

}  // namespace areal
