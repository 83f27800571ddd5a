#include "areal/rl/text_dataset.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <stdexcept>

#include "areal/rl/byte_tokenizer.h"
#include "areal/util/strings.h"

namespace areal {

TextDataset::TextDataset(const std::string& path, const std::string& key, int64_t max_length) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error(cat(path, ": cannot read the dataset"));
  ByteTokenizer tokenizer;
  std::string line;
  for (int64_t number = 1; std::getline(file, line); ++number) {
    if (trim(line).empty()) continue;
    nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    if (row.is_discarded() || !row.is_object())
      throw std::runtime_error(cat(path, ":", number, ": not a JSON object"));
    if (!row.contains(key) || !row[key].is_string())
      throw std::runtime_error(cat(path, ":", number, ": no string field '", key, "'"));
    std::vector<int64_t> ids = tokenizer.encode(row[key].get<std::string>());
    if (max_length > 0 && static_cast<int64_t>(ids.size()) > max_length) {
      ++skipped_;
      continue;
    }
    sequences_.push_back(std::move(ids));
  }
  if (sequences_.empty()) throw std::runtime_error(cat(path, ": no usable sequences"));
}

std::vector<size_t> TextDataset::epoch_order(int64_t seed, int64_t epoch, bool shuffle) const {
  std::vector<size_t> order(sequences_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (shuffle) {
    std::mt19937_64 rng(static_cast<uint64_t>(seed) * 1000003 + static_cast<uint64_t>(epoch));
    std::shuffle(order.begin(), order.end(), rng);  // same engine and seed: same order on every rank
  }
  return order;
}

}  // namespace areal
