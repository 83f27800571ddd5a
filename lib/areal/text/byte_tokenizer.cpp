#include "areal/text/byte_tokenizer.h"

namespace areal {

std::vector<int64_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

std::vector<int64_t> ByteTokenizer::encode_document(const std::string& text) const {
  std::vector<int64_t> ids = {kBos};
  for (unsigned char c : text) ids.push_back(c);
  ids.push_back(kEos);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special) const {
  std::string text;
  for (int64_t id : ids) {
    if (id >= 0 && id < 256) text.push_back(static_cast<char>(id));
    else if (!skip_special && id == kBos) text += "<bos>";
    else if (!skip_special && id == kEos) text += "<eos>";
  }
  return text;
}

std::optional<int64_t> ByteTokenizer::token_id(const std::string& token) const {
  if (token == "<bos>") return kBos;
  if (token == "<eos>") return kEos;
  if (token.size() == 1) return static_cast<unsigned char>(token[0]);
  return std::nullopt;
}

}  // namespace areal
