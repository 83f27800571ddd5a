#include "areal/rl/byte_tokenizer.h"

namespace areal {

std::vector<int64_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<int64_t> ids = {kBos};
  for (unsigned char c : text) ids.push_back(c);
  ids.push_back(kEos);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  for (int64_t id : ids)
    if (id >= 0 && id < 256) text.push_back(static_cast<char>(id));
  return text;
}

}  // namespace areal
