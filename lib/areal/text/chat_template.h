// How a prompt becomes the tokens the model continues (`chat_template` option):
//   auto    the model's own template when its tokenizer folder has one, else none
//   model   the model's own template: chat_template.jinja, chat_template.json or
//           tokenizer_config.json's chat_template, rendered as transformers'
//           apply_chat_template(messages, add_generation_prompt=True, enable_thinking=...)
//   none    the tokenizer's prompt prefix (BOS for the byte tokenizer), then the prompt
//   qwen    ChatML as Qwen2.5's template writes one user turn (with its default system
//           prompt), ending in "<|im_start|>assistant\n"; <|im_end|> ends the answer
//   llama3  LLaMA 3's header format for one user turn, ending in the assistant header;
//           <|eot_id|> ends the answer
// A prompt is a text (one user message) or a list of messages (a dataset's `messages`);
// only the model's template renders a list.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "areal/text/tokenizer.h"

namespace areal {

// A model's own Jinja chat template with the variables transformers gives it (the
// tokenizer's bos_token, eos_token, ...).
class ModelChatTemplate {
 public:
  // From the tokenizer's folder; nullptr when it has no template. Throws ConfigError
  // naming the file for a template that cannot be read or parsed.
  static std::shared_ptr<const ModelChatTemplate> load(const std::string& folder);
  ~ModelChatTemplate();

  // apply_chat_template(messages, tools, add_generation_prompt, **kwargs) as text:
  // `messages_json` a JSON list of messages, `kwargs_json` a JSON object of the other
  // variables (tools, enable_thinking, ...). Throws jinja::JinjaError.
  std::string render(const std::string& messages_json, bool add_generation_prompt,
                     const std::string& kwargs_json = "{}") const;
  const std::string& source() const { return source_; }  // the file it came from

 private:
  struct Impl;
  ModelChatTemplate(std::string source, std::unique_ptr<Impl> impl);
  std::string source_;
  std::unique_ptr<Impl> impl_;
};

struct PromptTemplate {
  std::string name;               // none, qwen, llama3 or model (auto resolved)
  std::vector<int64_t> stop_ids;  // tokens that end an answer besides EOS
  std::shared_ptr<const ModelChatTemplate> model;  // for "model"
  bool enable_thinking = false;   // passed to the model's template (Qwen3's thinking switch)
};

// Resolves `name` for the tokenizer in `tokenizer_folder` ("" for the byte tokenizer)
// and checks that the tokenizer has the template's special tokens. The model's
// template stops answers at the EOS ids of generation_config.json too. Throws
// ConfigError naming the option and what is missing.
PromptTemplate prompt_template(const std::string& name, const Tokenizer& tokenizer,
                               const std::string& tokenizer_folder = "", bool enable_thinking = false);

// The text the model continues, and its tokens. `messages_json`: a JSON list of
// messages, or "" to use `prompt` as one user message. Throws std::runtime_error for
// a list with a template other than the model's and for a template that fails.
std::string prompt_text(const PromptTemplate& tmpl, const Tokenizer& tokenizer, const std::string& prompt,
                        const std::string& messages_json = "");
std::vector<int64_t> prompt_tokens(const PromptTemplate& tmpl, const Tokenizer& tokenizer, const std::string& prompt,
                                   const std::string& messages_json = "");

// An episode's environment message (role user or tool) as tokens that follow the
// model's turn: the message as the template writes it after an assistant turn, then the
// next assistant turn's start. `closed`: the turn ended with an end-of-turn token; if
// not, one comes first (AReaL adds EOS). The model's template: the tokens its rendering
// of [assistant, message] + generation prompt has past that of [assistant], as AReaL's
// multi-turn workflow cuts them; none: the content's tokens only. Throws
// std::runtime_error for another role or a template that rewrites the turn.
std::vector<int64_t> message_tokens(const PromptTemplate& tmpl, const Tokenizer& tokenizer, const std::string& role,
                                    const std::string& content, bool closed);

// A supervised example: the prompt and its answer as one sequence, and where the answer
// starts. With the model's template the answer is the assistant's turn as the template
// writes it (its end-of-turn tokens included); otherwise the answer's tokens follow the
// prompt's, ended by the template's end-of-turn token or EOS.
struct PromptAnswer {
  std::vector<int64_t> ids;
  int64_t answer_start = 0;
};
PromptAnswer prompt_answer_tokens(const PromptTemplate& tmpl, const Tokenizer& tokenizer, const std::string& prompt,
                                  const std::string& answer, const std::string& messages_json = "");

// A whole conversation for supervised training (a `messages` row with several assistant
// turns), as the model's template writes it, and the token range [begin, end) of each
// assistant turn: its text and end-of-turn tokens, as prompt_answer_tokens gives one
// answer. Throws std::runtime_error when the template is not the model's or writes an
// earlier turn differently once later turns follow (then no turn's tokens are a prefix).
struct ConversationTokens {
  std::vector<int64_t> ids;
  std::vector<std::pair<int64_t, int64_t>> assistant_spans;
};
ConversationTokens conversation_tokens(const PromptTemplate& tmpl, const Tokenizer& tokenizer,
                                       const std::string& messages_json);

}  // namespace areal
