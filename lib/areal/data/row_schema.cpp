#include "areal/data/row_schema.h"

#include <algorithm>
#include <stdexcept>

#include "areal/data/jsonl.h"
#include "areal/reward/math_grader.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

using nlohmann::json;

std::runtime_error bad(const std::string& where, const std::string& what) { return std::runtime_error(where + ": " + what); }

bool has(const json& row, const std::string& key) { return row.contains(key); }

// A field as text: strings as they are, numbers (GSM8K-style answers) as JSON writes them.
std::string text_field(const json& value, const std::string& name, const std::string& where) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number()) return value.dump();
  if (value.is_null()) throw bad(where, cat("field '", name, "' is null (a string is needed)"));
  throw bad(where, cat("field '", name, "' is not a string or a number"));
}

std::string fields_of(const json& row) {
  std::vector<std::string> names;
  for (const auto& [key, value] : row.items()) names.push_back(key);
  return names.empty() ? "none" : join(names, ", ");
}

std::runtime_error unknown_schema(const json& row, const std::string& where, const std::string& prompt_key) {
  return bad(where, cat("none of the known fields: '", prompt_key, "' (train_dataset.prompt_key: a string or chat "
                        "messages; veRL's prompt with reward_model.ground_truth), 'question' and 'answer' (GSM8K), "
                        "'problem' and 'solution' (MATH), 'messages' (chat); the row has ", fields_of(row),
                        " (docs/data.md)"));
}

// The final answer of GSM8K's solution: the text after its last "####".
std::string gsm8k_reference(const std::string& solution, const std::string& where) {
  const size_t at = solution.rfind("####");
  if (at == std::string::npos) throw bad(where, "field 'answer' has no final answer after '####' (GSM8K's form)");
  return trim(solution.substr(at + 4));
}

std::string math_reference(const std::string& solution, const std::string& where) {
  std::optional<std::string> boxed = last_boxed(solution);
  if (!boxed) throw bad(where, "field 'solution' has no final answer in \\boxed{} (MATH's form)");
  return trim(*boxed);
}

// A chat conversation split before its last assistant turn: (earlier messages, that turn's text).
std::pair<json, std::string> split_last_assistant(const json& messages, const std::string& where) {
  chat_messages_json(messages, where + ": field 'messages'");  // checks the shape
  json before = messages;
  std::string last;
  if (!before.empty() && before.back()["role"] == "assistant") {
    if (!before.back().contains("content") || !before.back()["content"].is_string())
      throw bad(where, "field 'messages': the last assistant message has no string 'content'");
    last = before.back()["content"].get<std::string>();
    before.erase(before.size() - 1);
  }
  return {before, last};
}

}  // namespace

PromptExample rl_example(const json& row, const std::string& where, const std::string& prompt_key,
                         const std::string& answer_key) {
  PromptExample example;
  example.row_json = row.dump();
  if (has(row, prompt_key)) {  // plain, and veRL's rows
    const json& prompt = row[prompt_key];
    if (prompt.is_array()) {
      example.messages_json = chat_messages_json(prompt, cat(where, ": field '", prompt_key, "'"));
      example.prompt = last_user_text(prompt);
    } else {
      example.prompt = text_field(prompt, prompt_key, where);
    }
    if (has(row, answer_key)) {
      example.answer = text_field(row[answer_key], answer_key, where);
    } else if (has(row, "reward_model") && row["reward_model"].is_object() &&
               row["reward_model"].contains("ground_truth")) {
      example.answer = text_field(row["reward_model"]["ground_truth"], "reward_model.ground_truth", where);
    } else {
      throw bad(where, cat("no field '", answer_key, "' (train_dataset.answer_key) nor reward_model.ground_truth "
                           "(veRL's) for the reference answer"));
    }
    return example;
  }
  if (has(row, "question") && has(row, "answer")) {  // GSM8K
    example.prompt = text_field(row["question"], "question", where) + kBoxedAnswerSuffix;  // one user turn
    example.answer = gsm8k_reference(text_field(row["answer"], "answer", where), where);
    return example;
  }
  if (has(row, "problem") && has(row, "solution")) {  // MATH
    example.prompt = text_field(row["problem"], "problem", where) + kBoxedAnswerSuffix;
    example.answer = math_reference(text_field(row["solution"], "solution", where), where);
    return example;
  }
  if (has(row, "messages") && row["messages"].is_array()) {  // chat
    auto [before, last] = split_last_assistant(row["messages"], where);
    example.messages_json = before.dump();
    example.prompt = last_user_text(before);
    if (has(row, answer_key)) example.answer = text_field(row[answer_key], answer_key, where);
    else if (!last.empty()) example.answer = last;
    else throw bad(where, cat("field 'messages' ends with no assistant turn and there is no field '", answer_key,
                              "' for the reference answer"));
    return example;
  }
  throw unknown_schema(row, where, prompt_key);
}

SftExample sft_example(const json& row, const std::string& where, const std::string& prompt_key,
                       const std::string& answer_key) {
  SftExample example;
  if (has(row, "text")) {
    example.text = text_field(row["text"], "text", where);
    return example;
  }
  if (has(row, prompt_key)) {
    const json& prompt = row[prompt_key];
    if (prompt.is_array()) example.messages_json = chat_messages_json(prompt, cat(where, ": field '", prompt_key, "'"));
    else example.prompt = text_field(prompt, prompt_key, where);
    if (!has(row, answer_key))
      throw bad(where, cat("no field '", answer_key, "' (train_dataset.answer_key) for the text to train on"));
    example.answer = text_field(row[answer_key], answer_key, where);
    return example;
  }
  if (has(row, "question") && has(row, "answer")) {  // GSM8K: the whole solution is trained on
    example.prompt = text_field(row["question"], "question", where);
    example.answer = text_field(row["answer"], "answer", where);
    return example;
  }
  if (has(row, "problem") && has(row, "solution")) {
    example.prompt = text_field(row["problem"], "problem", where);
    example.answer = text_field(row["solution"], "solution", where);
    return example;
  }
  if (has(row, "messages") && row["messages"].is_array()) {
    auto [before, last] = split_last_assistant(row["messages"], where);
    if (last.empty()) throw bad(where, "field 'messages' ends with no assistant turn to train on");
    if (std::any_of(before.begin(), before.end(), [](const json& m) { return m["role"] == "assistant"; })) {
      example.conversation_json = row["messages"].dump();  // several turns: each is trained on
      return example;
    }
    example.messages_json = before.dump();
    example.answer = last;
    return example;
  }
  throw unknown_schema(row, where, prompt_key);
}

}  // namespace areal
