#include "areal/text/chat_template.h"

#include "areal/util/error.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

const char* kQwenSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

int64_t required_token(const Tokenizer& tokenizer, const std::string& tmpl, const std::string& token) {
  auto id = tokenizer.token_id(token);
  if (!id)
    throw ConfigError(cat("option 'chat_template' = ", tmpl, ": the tokenizer has no token '", token,
                          "' (use the template of the model's family, or none)"));
  return *id;
}

}  // namespace

PromptTemplate prompt_template(const std::string& name, const Tokenizer& tokenizer) {
  if (name == "none") return {name, {}};
  if (name == "qwen") {
    required_token(tokenizer, name, "<|im_start|>");
    return {name, {required_token(tokenizer, name, "<|im_end|>")}};
  }
  if (name == "llama3") {
    for (const char* token : {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>"})
      required_token(tokenizer, name, token);
    return {name, {required_token(tokenizer, name, "<|eot_id|>")}};
  }
  throw ConfigError(cat("option 'chat_template' = ", name, ": unknown (none, qwen, llama3)"));
}

std::vector<int64_t> prompt_tokens(const PromptTemplate& tmpl, const Tokenizer& tokenizer, const std::string& prompt) {
  if (tmpl.name == "qwen")
    return tokenizer.encode(cat("<|im_start|>system\n", kQwenSystem, "<|im_end|>\n<|im_start|>user\n", prompt,
                                "<|im_end|>\n<|im_start|>assistant\n"));
  if (tmpl.name == "llama3")
    return tokenizer.encode(cat("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n", prompt,
                                "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"));
  std::vector<int64_t> ids = tokenizer.prompt_prefix();
  std::vector<int64_t> text = tokenizer.encode(prompt);
  ids.insert(ids.end(), text.begin(), text.end());
  return ids;
}

}  // namespace areal
