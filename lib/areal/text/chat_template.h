// How a prompt becomes the tokens the model continues (`chat_template` option):
//   none    the tokenizer's prompt prefix (BOS for the byte tokenizer), then the prompt
//   qwen    ChatML as Qwen2.5's template writes one user turn (with its default system
//           prompt), ending in "<|im_start|>assistant\n"; <|im_end|> ends the answer
//   llama3  LLaMA 3's header format for one user turn, ending in the assistant header;
//           <|eot_id|> ends the answer
#pragma once

#include <string>
#include <vector>

#include "areal/text/tokenizer.h"

namespace areal {

struct PromptTemplate {
  std::string name;
  std::vector<int64_t> stop_ids;  // the template's end-of-turn token, besides EOS
};

// Checks that the tokenizer has the template's special tokens; throws ConfigError
// naming the missing one otherwise.
PromptTemplate prompt_template(const std::string& name, const Tokenizer& tokenizer);

std::vector<int64_t> prompt_tokens(const PromptTemplate& tmpl, const Tokenizer& tokenizer, const std::string& prompt);

}  // namespace areal
