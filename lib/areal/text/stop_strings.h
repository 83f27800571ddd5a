// Stop strings (gconfig.stop, AReaL's name): an answer ends as soon as its decoded text
// contains one of them, wherever the token boundaries fall (a stop string may be split
// over several tokens, or be part of one). The tokens stay as sampled: the stop string,
// and anything the last token carries after it, is kept in the answer, as AReaL keeps it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "areal/text/tokenizer.h"

namespace areal {

class StopStrings {
 public:
  // `tokenizer` must outlive this. Throws std::invalid_argument for an empty stop string.
  StopStrings(std::vector<std::string> stops, const Tokenizer& tokenizer);

  // Whether the answer's text, up to and including its last token, holds a stop string
  // that the text without the last token did not: called after each new token, it
  // fires at the token that completes the first stop string. Decodes only the last
  // tokens (as many as the longest stop string has bytes: every token has at least one),
  // none before `begin` (an episode's current turn: earlier turns' text does not count).
  bool completed_by_last_token(const std::vector<int64_t>& answer, size_t begin = 0) const;

 private:
  std::vector<std::string> stops_;
  const Tokenizer& tokenizer_;
  size_t window_ = 0;  // tokens decoded from the end
};

}  // namespace areal
