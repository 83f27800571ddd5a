// What the RL loop needs from a tokenizer: text <-> token ids, the end-of-sequence
// and padding ids, and the ids of named special tokens (for chat templates).
// Two implementations: ByteTokenizer (tiny models, one token per byte) and
// BpeTokenizer (a Hugging Face tokenizer.json, byte-level BPE as in Qwen2 / LLaMA 3).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace areal {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // The text's tokens; special tokens written in the text (`<|im_end|>`) are recognized
  // as such. Adds nothing at the start or the end.
  virtual std::vector<int64_t> encode(const std::string& text) const = 0;
  // Tokens back to text; special tokens are dropped when skip_special.
  virtual std::string decode(const std::vector<int64_t>& ids, bool skip_special = true) const = 0;
  virtual int64_t vocab_size() const = 0;  // the largest id + 1
  virtual int64_t eos_id() const = 0;      // ends a generated answer
  virtual int64_t pad_id() const = 0;      // fills batches; never attended to
  // Tokens a plain prompt (no chat template) starts with: BOS where the model expects one.
  virtual std::vector<int64_t> prompt_prefix() const = 0;
  // The id of a special or ordinary token given by its text, if the vocabulary has it.
  virtual std::optional<int64_t> token_id(const std::string& token) const = 0;
};

// The tokenizer for a model: `path` names a tokenizer.json (or a directory holding
// one); `byte` (or empty with no tokenizer.json in model_dir) is the byte-level one.
// Throws ConfigError for a file that cannot be used, naming it and the reason.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path, const std::string& model_dir);

// The folder of the tokenizer load_tokenizer(path, model_dir) reads (where its
// tokenizer_config.json and chat template are); "" for the byte tokenizer.
std::string tokenizer_folder(const std::string& path, const std::string& model_dir);

}  // namespace areal
