// A Hugging Face tokenizer.json of the BPE kind, encoding and decoding as the
// `tokenizers` package does. Two shapes:
//   byte-level (GPT-2, Qwen2/Qwen2.5, LLaMA 3, DeepSeek): Split(regex, Isolated) then
//     ByteLevel (or ByteLevel with its own GPT-2 regex); each piece's bytes map to the
//     GPT-2 byte alphabet; the regexes run on ICU with \s widened to Unicode White_Space
//     as Oniguruma reads it;
//   SentencePiece-style (LLaMA 2, Mistral, Gemma): no pre-tokenizer or Metaspace; spaces
//     become "▁" (a Replace normalizer or Metaspace), with a "▁" prepended (Prepend
//     normalizer or Metaspace's prepend_scheme); symbols are characters, and with
//     byte_fallback a character outside the vocabulary becomes its <0xXX> byte tokens
//     (else <unk>); decoding through the file's decoders (Replace, ByteFallback, Fuse,
//     Strip, Metaspace).
// In both, added tokens (special or not) are cut out of the text first, longest match
// wins; the normalizer is none, NFC, Prepend, Replace or a Sequence of them (empty too);
// pieces are merged by rank (with ignore_merges, a piece that is a whole vocabulary
// entry is taken as is). Anything else (WordPiece, Unigram, other normalizers,
// pre-tokenizers, decoders or split behaviours) is refused by name when the file is loaded.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "areal/text/tokenizer.h"
#include "areal/util/error.h"

namespace areal {

class BpeTokenizer : public Tokenizer {
 public:
  // `path`: the tokenizer.json. EOS and PAD come from tokenizer_config.json beside it
  // (eos_token, pad_token), else from the usual names (<|endoftext|>, <|end_of_text|>, </s>).
  // Throws ConfigError naming the file and what is unsupported or malformed.
  explicit BpeTokenizer(const std::string& path);
  ~BpeTokenizer() override;

  std::vector<int64_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special = true) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t eos_id() const override { return eos_id_; }
  int64_t pad_id() const override { return pad_id_; }
  std::vector<int64_t> prompt_prefix() const override { return prefix_; }
  std::optional<int64_t> token_id(const std::string& token) const override;

 private:
  // The constructor's parts, each reading one section of tokenizer.json.
  void read_model(const nlohmann::json& doc);
  void read_normalizer(const nlohmann::json& doc);
  void read_pre_tokenizer(const nlohmann::json& doc);
  void read_decoder(const nlohmann::json& doc);
  void read_prompt_prefix(const nlohmann::json& doc);
  void read_special_tokens();
  // A ConfigError naming the file.
  ConfigError failure(const std::string& what) const;
  struct Regexes;  // compiled ICU patterns (bpe_tokenizer.cpp)

  // `text` lies between added tokens; `at_start`: it begins the whole input.
  void encode_ordinary(const std::string& text, bool at_start, std::vector<int64_t>& out) const;
  void encode_piece(const std::string& piece, std::vector<int64_t>& out) const;
  std::vector<std::string> initial_symbols(const std::string& piece) const;
  std::string normalize(const std::string& text) const;
  std::string decode_sentencepiece(const std::vector<std::string>& tokens) const;

  struct Step {  // a normalizer or decoder step: its type and arguments
    std::string type, from, to;
    int64_t start = 0, stop = 0;
  };

  std::string path_;
  std::unordered_map<std::string, int64_t> vocab_;     // byte-alphabet token -> id
  std::vector<std::string> id_to_token_;               // "" for unused ids
  std::map<std::pair<std::string, std::string>, int64_t> merge_rank_;
  bool ignore_merges_ = false;
  bool add_prefix_space_ = false;
  bool sentencepiece_ = false;  // no ByteLevel: symbols are characters, "▁" for spaces
  bool byte_fallback_ = false, fuse_unk_ = false;
  int64_t unk_id_ = -1;
  std::vector<Step> normalizers_;  // NFC, Prepend, Replace
  std::vector<Step> decoders_;     // SentencePiece-style: Replace, ByteFallback, Fuse, Strip, Metaspace
  std::string metaspace_;          // Metaspace pre-tokenizer's replacement ("" without one)
  std::string prepend_scheme_;     // its prepend_scheme: always, first, never
  bool metaspace_split_ = false;
  std::vector<std::pair<std::string, int64_t>> added_;  // added tokens, longest first
  std::vector<bool> is_special_;                        // by id
  std::unique_ptr<Regexes> regexes_;
  std::vector<int64_t> prefix_;
  int64_t vocab_size_ = 0, eos_id_ = -1, pad_id_ = -1;
  mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;  // piece -> ids
};

}  // namespace areal
