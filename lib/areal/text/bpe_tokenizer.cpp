#include "areal/text/bpe_tokenizer.h"

#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "areal/util/error.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

using json = nlohmann::json;

// GPT-2's map of the 256 bytes to printable code points (bytes_to_unicode).
struct ByteAlphabet {
  std::array<std::string, 256> to_char;   // byte -> UTF-8 of its code point
  std::unordered_map<uint32_t, uint8_t> to_byte;

  ByteAlphabet() {
    uint32_t extra = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const uint32_t cp = printable ? b : extra++;
      icu::UnicodeString s(static_cast<UChar32>(cp));
      s.toUTF8String(to_char[b]);
      to_byte[cp] = static_cast<uint8_t>(b);
    }
  }
};
const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

// ICU's \s is [\t\n\f\r\p{Z}]; Oniguruma's (which `tokenizers` uses) is Unicode
// White_Space, which adds \v and U+0085. Rewrite \s and \S so both agree.
std::string widen_whitespace(const std::string& pattern) {
  const std::string ws = "\\t\\n\\x{0B}\\f\\r\\x{85}\\p{Z}";
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char n = pattern[++i];
      if (n == 's') out += in_class ? ws : "[" + ws + "]";
      else if (n == 'S' && !in_class) out += "[^" + ws + "]";
      else out += std::string{c, n};
      continue;
    }
    if (c == '[') in_class = true;
    if (c == ']') in_class = false;
    out += c;
  }
  return out;
}

const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(cat(path, ": cannot read the tokenizer"));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A token given as "text" or {"content": "text"} (tokenizer_config.json).
std::string token_text(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content")) return value["content"].get<std::string>();
  return "";
}

}  // namespace

struct BpeTokenizer::Regexes {
  std::vector<std::unique_ptr<icu::RegexPattern>> splits;  // applied in order, each Isolated
};

BpeTokenizer::~BpeTokenizer() = default;

BpeTokenizer::BpeTokenizer(const std::string& path) : path_(path), regexes_(std::make_unique<Regexes>()) {
  const json doc = json::parse(read_text(path), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) throw failure("not a JSON object");
  if (!doc.contains("model") || !doc["model"].is_object()) throw failure("no \"model\" section");
  read_model(doc);
  read_normalizer(doc);
  read_pre_tokenizer(doc);
  read_prompt_prefix(doc);
  read_special_tokens();
}

ConfigError BpeTokenizer::failure(const std::string& what) const { return ConfigError(cat(path_, ": ", what)); }

// The BPE model: vocabulary, merges, added tokens.
void BpeTokenizer::read_model(const json& doc) {
  const json& model = doc["model"];
  const std::string type = model.value("type", "");
  if (type != "BPE")
    throw failure(cat("tokenizer model type '", type, "' is not supported (only byte-level BPE: GPT-2, Qwen2, LLaMA 3)"));
  if (model.value("byte_fallback", false)) throw failure("BPE with byte_fallback (SentencePiece style) is not supported");
  if (!model["continuing_subword_prefix"].is_null() && !model.value("continuing_subword_prefix", std::string()).empty())
    throw failure("BPE with a continuing_subword_prefix is not supported");
  ignore_merges_ = model.value("ignore_merges", false);

  // Vocabulary, merges, added tokens.
  int64_t max_id = -1;
  for (auto& [token, id] : model.at("vocab").items()) {
    vocab_[token] = id.get<int64_t>();
    max_id = std::max(max_id, id.get<int64_t>());
  }
  int64_t rank = 0;
  for (const json& merge : model.at("merges")) {
    std::pair<std::string, std::string> pair;
    if (merge.is_string()) {  // "a b" (older files)
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ', 1);
      if (space == std::string::npos) throw failure(cat("malformed merge '", text, "'"));
      pair = {text.substr(0, space), text.substr(space + 1)};
    } else {  // ["a", "b"]
      pair = {merge.at(0).get<std::string>(), merge.at(1).get<std::string>()};
    }
    merge_rank_.emplace(std::move(pair), rank++);
  }
  std::vector<std::pair<int64_t, bool>> added_ids;
  if (doc.contains("added_tokens"))
    for (const json& t : doc["added_tokens"]) {
      const std::string content = t.at("content").get<std::string>();
      const int64_t id = t.at("id").get<int64_t>();
      added_.emplace_back(content, id);
      added_ids.emplace_back(id, t.value("special", false));
      max_id = std::max(max_id, id);
    }
  std::stable_sort(added_.begin(), added_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  vocab_size_ = max_id + 1;
  id_to_token_.assign(vocab_size_, "");
  is_special_.assign(vocab_size_, false);
  for (const auto& [token, id] : vocab_) id_to_token_[id] = token;
  for (const auto& [content, id] : added_) id_to_token_[id] = content;
  for (const auto& [id, special] : added_ids) is_special_[id] = special;

}

void BpeTokenizer::read_normalizer(const json& doc) {
  const json& normalizer = doc.value("normalizer", json());
  if (!normalizer.is_null()) {
    if (normalizer.value("type", "") != "NFC")
      throw failure(cat("normalizer '", normalizer.value("type", "?"), "' is not supported (none or NFC)"));
    nfc_ = true;
  }

}

// [Split(regex, Isolated)...] then ByteLevel, and the ByteLevel decoder.
void BpeTokenizer::read_pre_tokenizer(const json& doc) {
  auto compile = [&](const std::string& pattern) {
    UErrorCode status = U_ZERO_ERROR;
    UParseError where;
    std::unique_ptr<icu::RegexPattern> re(
        icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(widen_whitespace(pattern)), 0, where, status));
    if (U_FAILURE(status)) throw failure(cat("the pre-tokenizer regex does not compile (", u_errorName(status), ")"));
    regexes_->splits.push_back(std::move(re));
  };
  std::vector<json> steps;
  const json& pre = doc.value("pre_tokenizer", json());
  if (pre.is_object() && pre.value("type", "") == "Sequence") steps = pre.at("pretokenizers").get<std::vector<json>>();
  else if (pre.is_object()) steps = {pre};
  bool byte_level = false;
  for (const json& step : steps) {
    const std::string kind = step.value("type", "");
    if (kind == "Split") {
      if (step.value("behavior", "") != "Isolated" || step.value("invert", false))
        throw failure(cat("Split pre-tokenizer with behavior '", step.value("behavior", "?"),
                       "' is not supported (Isolated, not inverted)"));
      if (!step.at("pattern").contains("Regex")) throw failure("Split pre-tokenizer with a plain string pattern");
      compile(step["pattern"]["Regex"].get<std::string>());
    } else if (kind == "ByteLevel") {
      byte_level = true;
      add_prefix_space_ = step.value("add_prefix_space", false);
      if (step.value("use_regex", true)) compile(kGpt2Regex);
    } else {
      throw failure(cat("pre-tokenizer '", kind, "' is not supported (Split, ByteLevel)"));
    }
  }
  if (!byte_level) throw failure("not a byte-level tokenizer (no ByteLevel pre-tokenizer)");
  const json& decoder = doc.value("decoder", json());
  if (decoder.is_object() && decoder.value("type", "") != "ByteLevel")
    throw failure(cat("decoder '", decoder.value("type", "?"), "' is not supported (ByteLevel)"));

}

// What a plain prompt starts with: the special tokens before $A in the post-processor's template.
void BpeTokenizer::read_prompt_prefix(const json& doc) {
  std::vector<json> processors;
  const json& post = doc.value("post_processor", json());
  if (post.is_object() && post.value("type", "") == "Sequence") processors = post.at("processors").get<std::vector<json>>();
  else if (post.is_object()) processors = {post};
  for (const json& p : processors)
    if (p.value("type", "") == "TemplateProcessing")
      for (const json& piece : p.at("single")) {
        if (!piece.contains("SpecialToken")) break;
        auto id = token_id(piece["SpecialToken"].at("id").get<std::string>());
        if (id) prefix_.push_back(*id);
      }

}

// EOS and PAD: tokenizer_config.json's, else the usual names.
void BpeTokenizer::read_special_tokens() {
  std::string eos, pad;
  const auto config_path = std::filesystem::path(path_).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    const json config = json::parse(read_text(config_path.string()), nullptr, false);
    if (config.is_object()) {
      if (config.contains("eos_token")) eos = token_text(config["eos_token"]);
      if (config.contains("pad_token")) pad = token_text(config["pad_token"]);
    }
  }
  if (eos.empty())
    for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>"})
      if (token_id(name)) {
        eos = name;
        break;
      }
  if (eos.empty() || !token_id(eos))
    throw failure(cat("no end-of-sequence token found (", eos.empty() ? "no eos_token in tokenizer_config.json"
                                                                    : "'" + eos + "' is not in the vocabulary", ")"));
  eos_id_ = *token_id(eos);
  pad_id_ = !pad.empty() && token_id(pad) ? *token_id(pad) : eos_id_;
}

std::optional<int64_t> BpeTokenizer::token_id(const std::string& token) const {
  for (const auto& [content, id] : added_)
    if (content == token) return id;
  auto it = vocab_.find(token);
  if (it != vocab_.end()) return it->second;
  return std::nullopt;
}

std::vector<int64_t> BpeTokenizer::encode(const std::string& text) const {
  std::vector<int64_t> out;
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const std::pair<std::string, int64_t>* hit = nullptr;
    for (const auto& added : added_)  // longest first
      if (text.compare(i, added.first.size(), added.first) == 0) {
        hit = &added;
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    encode_ordinary(text.substr(start, i - start), out);
    out.push_back(hit->second);
    i += hit->first.size();
    start = i;
  }
  encode_ordinary(text.substr(start), out);
  return out;
}

void BpeTokenizer::encode_ordinary(const std::string& text, std::vector<int64_t>& out) const {
  if (text.empty()) return;
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(text);
  if (nfc_) {
    UErrorCode status = U_ZERO_ERROR;
    u = icu::Normalizer2::getNFCInstance(status)->normalize(u, status);
    if (U_FAILURE(status)) throw std::runtime_error(cat(path_, ": NFC normalization failed"));
  }
  if (add_prefix_space_ && !u.startsWith(icu::UnicodeString(" "))) u.insert(0, icu::UnicodeString(" "));
  // Each Split cuts every piece of the previous one into matches and the gaps between them.
  std::vector<icu::UnicodeString> pieces = {u};
  for (const auto& re : regexes_->splits) {
    std::vector<icu::UnicodeString> next;
    for (const auto& piece : pieces) {
      UErrorCode status = U_ZERO_ERROR;
      std::unique_ptr<icu::RegexMatcher> m(re->matcher(piece, status));
      int32_t last = 0;
      while (m->find(status) && U_SUCCESS(status)) {
        const int32_t s = m->start(status), e = m->end(status);
        if (s > last) next.emplace_back(piece, last, s - last);
        if (e > s) next.emplace_back(piece, s, e - s);
        last = e;
      }
      if (last < piece.length()) next.emplace_back(piece, last, piece.length() - last);
    }
    pieces = std::move(next);
  }
  for (const auto& piece : pieces) {
    std::string bytes;
    piece.toUTF8String(bytes);
    encode_piece(bytes, out);
  }
}

void BpeTokenizer::encode_piece(const std::string& piece, std::vector<int64_t>& out) const {
  if (auto cached = cache_.find(piece); cached != cache_.end()) {
    out.insert(out.end(), cached->second.begin(), cached->second.end());
    return;
  }
  std::vector<std::string> symbols;  // the piece in the byte alphabet, one symbol per byte
  std::string word;
  for (unsigned char b : piece) {
    symbols.push_back(alphabet().to_char[b]);
    word += symbols.back();
  }
  std::vector<int64_t> ids;
  auto whole = vocab_.find(word);
  if (ignore_merges_ && whole != vocab_.end()) {
    ids.push_back(whole->second);
  } else {
    // Merge the adjacent pair of lowest rank (leftmost among equals) until none is left.
    while (symbols.size() > 1) {
      int64_t best = std::numeric_limits<int64_t>::max();
      size_t at = 0;
      for (size_t k = 0; k + 1 < symbols.size(); ++k) {
        auto it = merge_rank_.find({symbols[k], symbols[k + 1]});
        if (it != merge_rank_.end() && it->second < best) {
          best = it->second;
          at = k;
        }
      }
      if (best == std::numeric_limits<int64_t>::max()) break;
      symbols[at] += symbols[at + 1];
      symbols.erase(symbols.begin() + at + 1);
    }
    for (const auto& symbol : symbols) {
      auto it = vocab_.find(symbol);
      if (it == vocab_.end()) throw std::runtime_error(cat(path_, ": no token for '", symbol, "'"));
      ids.push_back(it->second);
    }
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (cache_.size() < 100000) cache_.emplace(piece, std::move(ids));
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special) const {
  std::string text;
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size_) continue;
    if (is_special_[id]) {
      if (!skip_special) text += id_to_token_[id];
      continue;
    }
    const std::string& token = id_to_token_[id];
    if (vocab_.count(token) == 0 || std::any_of(added_.begin(), added_.end(), [&](const auto& a) { return a.second == id; })) {
      text += token;  // an added (non-special) token is its own text
      continue;
    }
    icu::UnicodeString u = icu::UnicodeString::fromUTF8(token);
    for (int32_t k = 0; k < u.length(); k = u.moveIndex32(k, 1)) {
      auto b = alphabet().to_byte.find(static_cast<uint32_t>(u.char32At(k)));
      if (b != alphabet().to_byte.end()) text.push_back(static_cast<char>(b->second));
    }
  }
  return text;
}

}  // namespace areal
