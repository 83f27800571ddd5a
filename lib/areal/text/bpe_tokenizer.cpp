#include "areal/text/bpe_tokenizer.h"

#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <functional>
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

// Every occurrence of `from` in `s` replaced by `to` (a Replace normalizer or decoder).
std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string out;
  size_t at = 0;
  for (size_t hit = s.find(from); hit != std::string::npos; hit = s.find(from, at)) {
    out += s.substr(at, hit - at) + to;
    at = hit + from.size();
  }
  return out + s.substr(at);
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
  read_decoder(doc);
  read_prompt_prefix(doc);
  read_special_tokens();
}

ConfigError BpeTokenizer::failure(const std::string& what) const { return ConfigError(cat(path_, ": ", what)); }

// The BPE model: vocabulary, merges, added tokens.
void BpeTokenizer::read_model(const json& doc) {
  const json& model = doc["model"];
  const std::string type = model.value("type", "");
  if (type != "BPE")
    throw failure(cat("tokenizer model type '", type, "' is not supported (only BPE: byte-level as GPT-2, Qwen2, "
                      "LLaMA 3; SentencePiece-style as LLaMA 2, Mistral, Gemma)"));
  byte_fallback_ = model.value("byte_fallback", false);
  fuse_unk_ = model.value("fuse_unk", false);
  if (!model.value("end_of_word_suffix", json()).is_null() && !model.value("end_of_word_suffix", std::string()).empty())
    throw failure("BPE with an end_of_word_suffix is not supported");
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
  if (model.contains("unk_token") && model["unk_token"].is_string())
    if (auto id = token_id(model["unk_token"].get<std::string>())) unk_id_ = *id;
}

// A string pattern ({"String": " "}); a regex one is refused.
std::string string_pattern(const json& step, const std::function<ConfigError(const std::string&)>& failure) {
  if (!step.contains("pattern") || !step["pattern"].contains("String"))
    throw failure(cat(step.value("type", "?"), " with a regex pattern is not supported (a plain string)"));
  return step["pattern"]["String"].get<std::string>();
}

void BpeTokenizer::read_normalizer(const json& doc) {
  const json& normalizer = doc.value("normalizer", json());
  if (normalizer.is_null()) return;
  std::vector<json> steps = normalizer.value("type", "") == "Sequence" ? normalizer.at("normalizers").get<std::vector<json>>()
                                                                      : std::vector<json>{normalizer};
  auto fail = [this](const std::string& what) { return failure(what); };
  for (const json& step : steps) {
    const std::string type = step.value("type", "");
    if (type == "NFC") normalizers_.push_back({type, "", ""});
    else if (type == "Prepend") normalizers_.push_back({type, "", step.at("prepend").get<std::string>()});
    else if (type == "Replace") normalizers_.push_back({type, string_pattern(step, fail), step.at("content").get<std::string>()});
    else throw failure(cat("normalizer '", type, "' is not supported (NFC, Prepend, Replace or a Sequence of them)"));
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
    } else if (kind == "Metaspace") {
      metaspace_ = step.value("replacement", "\u2581");
      prepend_scheme_ = step.value("prepend_scheme", step.value("add_prefix_space", true) ? "always" : "never");
      metaspace_split_ = step.value("split", true);
    } else {
      throw failure(cat("pre-tokenizer '", kind, "' is not supported (Split, ByteLevel, Metaspace)"));
    }
  }
  sentencepiece_ = !byte_level;
  if (sentencepiece_ && !regexes_->splits.empty())
    throw failure("a Split pre-tokenizer without ByteLevel is not supported");
}

// The decoder: ByteLevel for byte-level files; the SentencePiece-style steps otherwise.
void BpeTokenizer::read_decoder(const json& doc) {
  const json& decoder = doc.value("decoder", json());
  if (!sentencepiece_) {
    if (decoder.is_object() && decoder.value("type", "") != "ByteLevel")
      throw failure(cat("decoder '", decoder.value("type", "?"), "' is not supported with ByteLevel (ByteLevel)"));
    return;
  }
  if (decoder.is_null()) return;
  std::vector<json> steps = decoder.value("type", "") == "Sequence" ? decoder.at("decoders").get<std::vector<json>>()
                                                                    : std::vector<json>{decoder};
  auto fail = [this](const std::string& what) { return failure(what); };
  for (const json& step : steps) {
    const std::string type = step.value("type", "");
    if (type == "Replace") decoders_.push_back({type, string_pattern(step, fail), step.at("content").get<std::string>()});
    else if (type == "ByteFallback" || type == "Fuse") decoders_.push_back({type, "", ""});
    else if (type == "Strip")
      decoders_.push_back({type, step.at("content").get<std::string>(), "", step.value("start", int64_t{0}),
                           step.value("stop", int64_t{0})});
    else if (type == "Metaspace")
      decoders_.push_back({type, step.value("replacement", "\u2581"),
                           step.value("prepend_scheme", step.value("add_prefix_space", true) ? "always" : "never")});
    else throw failure(cat("decoder '", type, "' is not supported (Replace, ByteFallback, Fuse, Strip, Metaspace)"));
  }
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
    encode_ordinary(text.substr(start, i - start), start == 0, out);
    out.push_back(hit->second);
    i += hit->first.size();
    start = i;
  }
  encode_ordinary(text.substr(start), start == 0, out);
  return out;
}

std::string BpeTokenizer::normalize(const std::string& text) const {
  std::string s = text;
  for (const Step& step : normalizers_) {
    if (step.type == "NFC") {
      UErrorCode status = U_ZERO_ERROR;
      icu::UnicodeString u = icu::Normalizer2::getNFCInstance(status)->normalize(icu::UnicodeString::fromUTF8(s), status);
      if (U_FAILURE(status)) throw std::runtime_error(cat(path_, ": NFC normalization failed"));
      s.clear();
      u.toUTF8String(s);
    } else if (step.type == "Prepend") {
      if (!s.empty()) s = step.to + s;
    } else if (step.type == "Replace") {
      s = replace_all(s, step.from, step.to);
    }
  }
  return s;
}

void BpeTokenizer::encode_ordinary(const std::string& text, bool at_start, std::vector<int64_t>& out) const {
  if (text.empty()) return;
  const std::string normalized = normalize(text);
  if (normalized.empty()) return;
  if (sentencepiece_) {
    std::string s = normalized;
    if (!metaspace_.empty()) {  // spaces to the replacement, one prepended, maybe split before each
      std::string replaced;
      for (char c : s) replaced += c == ' ' ? metaspace_ : std::string(1, c);
      s = replaced;
      const bool prepend = prepend_scheme_ == "always" || (prepend_scheme_ == "first" && at_start);
      if (prepend && s.compare(0, metaspace_.size(), metaspace_) != 0) s = metaspace_ + s;
      if (metaspace_split_) {
        size_t begin = 0;
        for (size_t at = s.find(metaspace_, 1); at != std::string::npos; at = s.find(metaspace_, at + 1)) {
          encode_piece(s.substr(begin, at - begin), out);
          begin = at;
        }
        encode_piece(s.substr(begin), out);
        return;
      }
    }
    encode_piece(s, out);
    return;
  }
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(normalized);
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

// A piece's symbols before any merge: byte-level, one per byte in the GPT-2 alphabet;
// SentencePiece-style, one per character (a character outside the vocabulary becomes
// its <0xXX> byte tokens with byte_fallback).
std::vector<std::string> BpeTokenizer::initial_symbols(const std::string& piece) const {
  std::vector<std::string> symbols;
  if (!sentencepiece_) {
    for (unsigned char b : piece) symbols.push_back(alphabet().to_char[b]);
    return symbols;
  }
  for (size_t i = 0; i < piece.size();) {
    const unsigned char c = piece[i];
    const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    std::string ch = piece.substr(i, n);
    i += n;
    if (vocab_.count(ch) || !byte_fallback_) {
      symbols.push_back(std::move(ch));
      continue;
    }
    for (unsigned char b : ch) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "<0x%02X>", b);
      symbols.emplace_back(hex);
    }
  }
  return symbols;
}

void BpeTokenizer::encode_piece(const std::string& piece, std::vector<int64_t>& out) const {
  if (auto cached = cache_.find(piece); cached != cache_.end()) {
    out.insert(out.end(), cached->second.begin(), cached->second.end());
    return;
  }
  std::vector<std::string> symbols = initial_symbols(piece);
  std::string word;
  for (const auto& symbol : symbols) word += symbol;
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
      if (it != vocab_.end()) {
        ids.push_back(it->second);
      } else if (unk_id_ >= 0) {  // an unknown character (no byte fallback)
        if (!(fuse_unk_ && !ids.empty() && ids.back() == unk_id_)) ids.push_back(unk_id_);
      } else {
        throw std::runtime_error(cat(path_, ": no token for '", symbol, "'"));
      }
    }
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (cache_.size() < 100000 && piece.size() < 256) cache_.emplace(piece, std::move(ids));
}

// The decoders' chain on the tokens' texts, as `tokenizers` runs it.
std::string BpeTokenizer::decode_sentencepiece(const std::vector<std::string>& tokens) const {
  std::vector<std::string> t = tokens;
  auto byte_of = [](const std::string& s) -> int {
    if (s.size() != 6 || s.compare(0, 3, "<0x") != 0 || s[5] != '>') return -1;
    return static_cast<int>(std::strtol(s.substr(3, 2).c_str(), nullptr, 16));
  };
  for (const Step& step : decoders_) {
    if (step.type == "Replace") {
      for (auto& token : t) token = replace_all(token, step.from, step.to);
    } else if (step.type == "ByteFallback") {  // runs of <0xXX> become their UTF-8 text, or one U+FFFD per byte
      std::vector<std::string> merged;
      std::string bytes;
      size_t count = 0;
      auto flush = [&] {
        if (count == 0) return;
        icu::UnicodeString u = icu::UnicodeString::fromUTF8(bytes);
        std::string back;
        u.toUTF8String(back);
        const bool valid = back == bytes;
        if (valid) merged.push_back(bytes);
        else for (size_t k = 0; k < count; ++k) merged.push_back("\xEF\xBF\xBD");
        bytes.clear();
        count = 0;
      };
      for (const auto& token : t) {
        const int b = byte_of(token);
        if (b < 0) {
          flush();
          merged.push_back(token);
        } else {
          bytes.push_back(static_cast<char>(b));
          ++count;
        }
      }
      flush();
      t = std::move(merged);
    } else if (step.type == "Fuse") {
      std::string all;
      for (const auto& token : t) all += token;
      t = {all};
    } else if (step.type == "Strip") {
      for (auto& token : t) {
        int64_t k = 0;
        while (k < step.start && token.compare(0, step.from.size(), step.from) == 0) token.erase(0, step.from.size()), ++k;
        k = 0;
        while (k < step.stop && token.size() >= step.from.size() &&
               token.compare(token.size() - step.from.size(), step.from.size(), step.from) == 0)
          token.erase(token.size() - step.from.size()), ++k;
      }
    } else if (step.type == "Metaspace") {  // the replacement is a space; in the first token it is dropped
      for (size_t i = 0; i < t.size(); ++i) {
        std::string out;
        const bool drop = i == 0 && step.to != "never";
        for (size_t at = 0; at < t[i].size();) {
          if (t[i].compare(at, step.from.size(), step.from) == 0) {
            if (!drop) out += ' ';
            at += step.from.size();
          } else {
            out += t[i][at++];
          }
        }
        t[i] = out;
      }
    }
  }
  std::string text;
  for (const auto& token : t) text += token;
  return text;
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special) const {
  if (sentencepiece_) {
    std::vector<std::string> tokens;
    for (int64_t id : ids)
      if (id >= 0 && id < vocab_size_ && !(skip_special && is_special_[id])) tokens.push_back(id_to_token_[id]);
    return decode_sentencepiece(tokens);
  }
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
