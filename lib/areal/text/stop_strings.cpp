#include "areal/text/stop_strings.h"

#include <algorithm>
#include <stdexcept>

namespace areal {
namespace {

size_t occurrences(const std::string& text, const std::string& s) {
  size_t count = 0;
  for (size_t at = text.find(s); at != std::string::npos; at = text.find(s, at + 1)) ++count;
  return count;
}

}  // namespace

StopStrings::StopStrings(std::vector<std::string> stops, const Tokenizer& tokenizer)
    : stops_(std::move(stops)), tokenizer_(tokenizer) {
  for (const auto& s : stops_) {
    if (s.empty()) throw std::invalid_argument("gconfig.stop: an empty stop string would end every answer at once");
    window_ = std::max(window_, s.size());
  }
}

bool StopStrings::completed_by_last_token(const std::vector<int64_t>& answer, size_t begin) const {
  if (stops_.empty() || answer.size() <= begin) return false;
  // A stop string that ends in the last token starts at most window_ - 1 tokens before
  // it, since every token decodes to at least one byte.
  const size_t first = std::max(begin, answer.size() > window_ ? answer.size() - window_ : 0);
  const std::string text = tokenizer_.decode({answer.begin() + static_cast<std::ptrdiff_t>(first), answer.end()});
  const std::string before =
      tokenizer_.decode({answer.begin() + static_cast<std::ptrdiff_t>(first), answer.end() - 1});
  // Counted, not just found: an occurrence held back by min_new_tokens may still be in
  // the window, and a new one must fire all the same.
  for (const auto& s : stops_)
    if (occurrences(text, s) > occurrences(before, s)) return true;
  return false;
}

}  // namespace areal
