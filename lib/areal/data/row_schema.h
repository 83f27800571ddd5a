// What a dataset row means, recognised by its fields (docs/data.md):
//   plain     train_dataset.prompt_key (a string, or a list of chat messages) and
//             answer_key; veRL's rows: `prompt` messages, `reward_model.ground_truth`
//   GSM8K     `question`, `answer`: the question with AReaL's suffix asking for a
//             \boxed{} answer (one user turn); the reference is the number after ####
//   MATH      `problem`, `solution`: the same suffix; the reference is the last \boxed{}
//   chat      `messages`: the conversation before its last assistant turn; the reference
//             is answer_key's field, else that turn
// For SFT: `text` (all of it), plain, GSM8K and MATH (prompt -> solution text), chat
// (the loss on every assistant turn).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "areal/data/builtin_tasks.h"

namespace areal {

// AReaL's GSM8K prompt suffix (areal/dataset/gsm8k.py).
inline constexpr const char* kBoxedAnswerSuffix = "\nPlease put your final answer within \\boxed{}.";

// Throws std::runtime_error naming `where` and the field: no known schema (listing the
// row's fields), a null or non-string where text is needed, a reference without its
// final answer.
PromptExample rl_example(const nlohmann::json& row, const std::string& where, const std::string& prompt_key,
                         const std::string& answer_key);

struct SftExample {
  std::string text;           // the whole text is trained on ("": prompt and answer)
  std::string prompt;         // with messages_json empty
  std::string messages_json;  // the conversation before the answer
  std::string answer;
  std::string conversation_json;  // a chat of several assistant turns, whole (then the fields above are "")
};
SftExample sft_example(const nlohmann::json& row, const std::string& where, const std::string& prompt_key,
                       const std::string& answer_key);

}  // namespace areal
