// The byte-level tokenizer of tiny models: one token per UTF-8 byte (0..255), plus
// BOS = 256 and EOS = 257 (the built-in tiny model's vocabulary of 258).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace areal {

struct ByteTokenizer {
  static constexpr int64_t kBos = 256;
  static constexpr int64_t kEos = 257;
  static constexpr int64_t kVocabSize = 258;

  // BOS, the bytes, EOS.
  std::vector<int64_t> encode(const std::string& text) const;
  // Bytes back to text; special tokens are dropped.
  std::string decode(const std::vector<int64_t>& ids) const;
};

}  // namespace areal
