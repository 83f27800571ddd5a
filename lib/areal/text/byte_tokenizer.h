// The byte-level tokenizer of tiny models: one token per UTF-8 byte (0..255), plus
// BOS = 256 and EOS = 257 (the built-in tiny model's vocabulary of 258).
#pragma once

#include "areal/text/tokenizer.h"

namespace areal {

class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int64_t kBos = 256;
  static constexpr int64_t kEos = 257;
  static constexpr int64_t kVocabSize = 258;

  std::vector<int64_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special = true) const override;
  int64_t vocab_size() const override { return kVocabSize; }
  int64_t eos_id() const override { return kEos; }
  int64_t pad_id() const override { return kEos; }
  std::vector<int64_t> prompt_prefix() const override { return {kBos}; }
  std::optional<int64_t> token_id(const std::string& token) const override;

  // A training document: BOS, the bytes, EOS.
  std::vector<int64_t> encode_document(const std::string& text) const;
};

}  // namespace areal
