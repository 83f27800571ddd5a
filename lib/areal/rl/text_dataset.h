// A JSONL file of texts for supervised fine-tuning: one JSON object per line, the text
// under `key` (or a built-in task, builtin_tasks.h: prompt + answer as the text).
// Tokenized once; sequences longer than max_length are skipped and counted.
// Batches come in a seeded order that is the same on every rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace areal {

class TextDataset {
 public:
  // Throws std::runtime_error naming the file and line for unreadable input.
  TextDataset(const std::string& path, const std::string& key, int64_t max_length);

  size_t size() const { return sequences_.size(); }
  int64_t skipped() const { return skipped_; }
  const std::vector<int64_t>& sequence(size_t i) const { return sequences_.at(i); }

 private:
  std::vector<std::vector<int64_t>> sequences_;
  int64_t skipped_ = 0;
};

}  // namespace areal
