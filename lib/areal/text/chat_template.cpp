#include "areal/text/chat_template.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "areal/io/hf_model_dir.h"
#include "areal/text/jinja_template.h"
#include "areal/util/error.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

using ordered_json = nlohmann::ordered_json;

const char* kQwenSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

int64_t required_token(const Tokenizer& tokenizer, const std::string& tmpl, const std::string& token) {
  auto id = tokenizer.token_id(token);
  if (!id)
    throw ConfigError(cat("option 'chat_template' = ", tmpl, ": the tokenizer has no token '", token,
                          "' (use the template of the model's family, or none)"));
  return *id;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

ordered_json read_json(const std::string& path) {
  ordered_json j = ordered_json::parse(read_file(path), nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw ConfigError(cat(path, ": not a JSON object"));
  return j;
}

// A chat_template value: the text, or transformers' list of named templates (the "default" one).
std::string template_text(const ordered_json& value, const std::string& path) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array())
    for (const auto& item : value)
      if (item.is_object() && item.value("name", "") == "default" && item.contains("template"))
        return item["template"].get<std::string>();
  throw ConfigError(cat(path, ": chat_template is neither a string nor a list with a 'default' template"));
}

// A special token's text: "<s>", or {"content": "<s>", ...} as older files write it.
std::string token_text(const ordered_json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) return value["content"];
  return "";
}

}  // namespace

struct ModelChatTemplate::Impl {
  jinja::Template jinja;
  jinja::ValueDict special_tokens;  // bos_token, eos_token, ... as transformers' special_tokens_map
};

ModelChatTemplate::ModelChatTemplate(std::string source, std::unique_ptr<Impl> impl)
    : source_(std::move(source)), impl_(std::move(impl)) {}
ModelChatTemplate::~ModelChatTemplate() = default;

std::shared_ptr<const ModelChatTemplate> ModelChatTemplate::load(const std::string& folder) {
  namespace fs = std::filesystem;
  if (folder.empty()) return nullptr;
  const io::HfModelDir dir(folder);
  const std::string config_path = dir.file(io::HfModelDir::kTokenizerConfigFile);
  const ordered_json config = fs::exists(config_path) ? read_json(config_path) : ordered_json::object();
  // transformers' order: chat_template.jinja, chat_template.json, tokenizer_config.json.
  std::string source, text;
  if (const std::string path = dir.file(io::HfModelDir::kChatTemplateFile); fs::exists(path)) {
    source = path;
    text = read_file(path);
  } else if (const std::string path = dir.file(io::HfModelDir::kChatTemplateJsonFile); fs::exists(path)) {
    source = path;
    text = template_text(read_json(path).value("chat_template", ordered_json()), path);
  } else if (config.contains("chat_template") && !config["chat_template"].is_null()) {
    source = config_path + " chat_template";
    text = template_text(config["chat_template"], config_path);
  } else {
    return nullptr;
  }
  auto impl = std::unique_ptr<Impl>(new Impl{[&] {
    try {
      return jinja::Template(text, source);
    } catch (const jinja::JinjaError& e) {
      throw ConfigError(e.what());
    }
  }(), {}});
  for (const char* name : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"})
    if (config.contains(name))
      if (std::string token = token_text(config[name]); !token.empty())
        impl->special_tokens.emplace_back(name, jinja::Value(token));
  return std::shared_ptr<const ModelChatTemplate>(new ModelChatTemplate(source, std::move(impl)));
}

std::string ModelChatTemplate::render(const std::string& messages_json, bool add_generation_prompt,
                                      const std::string& kwargs_json) const {
  // As render_jinja_template: messages, tools (None unless given), documents, the
  // generation switch, then the special tokens and the keyword arguments.
  jinja::ValueDict context = {{"messages", jinja::Value::from_json(ordered_json::parse(messages_json))},
                              {"tools", jinja::Value::none()},
                              {"documents", jinja::Value::none()},
                              {"add_generation_prompt", jinja::Value(add_generation_prompt)}};
  auto set = [&](const std::string& key, const jinja::Value& value) {
    for (auto& [k, v] : context)
      if (k == key) {
        v = value;
        return;
      }
    context.emplace_back(key, value);
  };
  for (const auto& [key, value] : impl_->special_tokens) set(key, value);
  const ordered_json kwargs = ordered_json::parse(kwargs_json);
  for (const auto& [key, value] : kwargs.items()) set(key, jinja::Value::from_json(value));
  return impl_->jinja.render(context);
}

PromptTemplate prompt_template(const std::string& name, const Tokenizer& tokenizer, const std::string& tokenizer_folder,
                               bool enable_thinking) {
  if (name == "auto" || name == "model") {
    auto model = ModelChatTemplate::load(tokenizer_folder);
    if (!model) {
      if (name == "auto") return {"none", {}, nullptr, enable_thinking};
      throw ConfigError(cat("option 'chat_template' = model: the tokenizer folder '", tokenizer_folder,
                            "' has no chat template (chat_template.jinja, chat_template.json or tokenizer_config.json's "
                            "chat_template); choose none, qwen or llama3"));
    }
    PromptTemplate tmpl{"model", {}, model, enable_thinking};
    // generation_config.json's eos_token_id (one id or a list): the end-of-turn tokens
    // of chat models (Llama 3's <|eot_id|>, Gemma's <end_of_turn>).
    const std::string generation = io::HfModelDir(tokenizer_folder).file(io::HfModelDir::kGenerationConfigFile);
    if (std::filesystem::exists(generation)) {
      const ordered_json eos = read_json(generation).value("eos_token_id", ordered_json());
      for (const auto& id : eos.is_array() ? eos : ordered_json::array({eos}))
        if (id.is_number_integer() && id.get<int64_t>() != tokenizer.eos_id()) tmpl.stop_ids.push_back(id.get<int64_t>());
    }
    return tmpl;
  }
  if (name == "none") return {name, {}, nullptr, enable_thinking};
  if (name == "qwen") {
    required_token(tokenizer, name, "<|im_start|>");
    return {name, {required_token(tokenizer, name, "<|im_end|>")}, nullptr, enable_thinking};
  }
  if (name == "llama3") {
    for (const char* token : {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>"})
      required_token(tokenizer, name, token);
    return {name, {required_token(tokenizer, name, "<|eot_id|>")}, nullptr, enable_thinking};
  }
  throw ConfigError(cat("option 'chat_template' = ", name, ": unknown (auto, model, none, qwen, llama3)"));
}

namespace {

ordered_json conversation(const std::string& prompt, const std::string& messages_json) {
  return !messages_json.empty() ? ordered_json::parse(messages_json)
                                : ordered_json::array({{{"role", "user"}, {"content", prompt}}});
}

std::string render_model(const PromptTemplate& tmpl, const ordered_json& messages, bool add_generation_prompt) {
  try {
    return tmpl.model->render(messages.dump(), add_generation_prompt,
                              ordered_json{{"enable_thinking", tmpl.enable_thinking}}.dump());
  } catch (const jinja::JinjaError& e) {
    throw std::runtime_error(cat("the chat template failed: ", e.what()));
  }
}

}  // namespace

std::string prompt_text(const PromptTemplate& tmpl, const Tokenizer& tokenizer, const std::string& prompt,
                        const std::string& messages_json) {
  (void)tokenizer;
  if (tmpl.name == "model") return render_model(tmpl, conversation(prompt, messages_json), true);
  if (!messages_json.empty())
    throw std::runtime_error(cat("the prompt is a list of messages, which chat_template ", tmpl.name,
                                 " cannot render (chat_template: model renders them with the model's own template)"));
  if (tmpl.name == "qwen")
    return cat("<|im_start|>system\n", kQwenSystem, "<|im_end|>\n<|im_start|>user\n", prompt,
               "<|im_end|>\n<|im_start|>assistant\n");
  if (tmpl.name == "llama3")
    return cat("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n", prompt,
               "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  return prompt;
}

std::vector<int64_t> prompt_tokens(const PromptTemplate& tmpl, const Tokenizer& tokenizer, const std::string& prompt,
                                   const std::string& messages_json) {
  const std::string text = prompt_text(tmpl, tokenizer, prompt, messages_json);
  if (tmpl.name != "none") return tokenizer.encode(text);
  std::vector<int64_t> ids = tokenizer.prompt_prefix();
  std::vector<int64_t> rest = tokenizer.encode(text);
  ids.insert(ids.end(), rest.begin(), rest.end());
  return ids;
}

std::vector<int64_t> message_tokens(const PromptTemplate& tmpl, const Tokenizer& tokenizer, const std::string& role,
                                    const std::string& content, bool closed) {
  if (role != "user" && role != "tool")
    throw std::runtime_error(cat("an environment message has role '", role, "' (user or tool)"));
  if (tmpl.name == "none") return tokenizer.encode(content);
  std::vector<int64_t> ids;
  if (tmpl.name == "model") {
    // AReaL's way (areal/workflow/multi_turn.py): the template's tokens after an
    // assistant turn for the message and a generation prompt, cut from the rendering
    // of [assistant, message] behind that of [assistant]; EOS first when the turn had
    // no end (a stop string, max_new_tokens).
    ordered_json messages = ordered_json::array({{{"role", "assistant"}, {"content", "some random message."}}});
    const std::vector<int64_t> before = tokenizer.encode(render_model(tmpl, messages, false));
    messages.push_back({{"role", role}, {"content", content}});
    const std::vector<int64_t> after = tokenizer.encode(render_model(tmpl, messages, true));
    if (after.size() <= before.size() || !std::equal(before.begin(), before.end(), after.begin()))
      throw std::runtime_error(cat("the chat template renders a ", role, " message after an assistant turn by "
                                   "changing the turn itself; its tokens cannot be appended to an episode"));
    if (!closed) ids.push_back(tokenizer.eos_id());
    ids.insert(ids.end(), after.begin() + static_cast<std::ptrdiff_t>(before.size()), after.end());
    return ids;
  }
  std::string text;
  if (tmpl.name == "qwen") {  // ChatML; a tool's reply as Qwen2.5's template writes one
    const std::string body = role == "tool" ? cat("<tool_response>\n", content, "\n</tool_response>") : content;
    text = cat(closed ? "" : "<|im_end|>", "\n<|im_start|>user\n", body, "<|im_end|>\n<|im_start|>assistant\n");
  } else {  // llama3; a tool's reply under the ipython role, as Llama 3.1's template
    text = cat(closed ? "" : "<|eot_id|>", "<|start_header_id|>", role == "tool" ? "ipython" : "user",
               "<|end_header_id|>\n\n", content, "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  }
  return tokenizer.encode(text);
}

ConversationTokens conversation_tokens(const PromptTemplate& tmpl, const Tokenizer& tokenizer,
                                       const std::string& messages_json) {
  if (tmpl.name != "model")
    throw std::runtime_error(cat("a conversation of several assistant turns needs the model's chat template "
                                 "(chat_template: model), not ", tmpl.name));
  const ordered_json messages = ordered_json::parse(messages_json);
  ConversationTokens out;
  out.ids = tokenizer.encode(render_model(tmpl, messages, false));
  // Each assistant turn lies between the rendering of the messages before it (with the
  // generation prompt) and the rendering through it: both must begin the whole.
  auto prefix_length = [&](size_t count, bool generation_prompt) {
    const ordered_json head(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(count));
    const std::vector<int64_t> ids = tokenizer.encode(render_model(tmpl, head, generation_prompt));
    if (ids.size() > out.ids.size() || !std::equal(ids.begin(), ids.end(), out.ids.begin()))
      throw std::runtime_error(cat("the chat template writes message ", count, " differently once later turns "
                                   "follow, so its assistant turns have no fixed tokens to train on"));
    return static_cast<int64_t>(ids.size());
  };
  for (size_t k = 0; k < messages.size(); ++k) {
    if (messages[k].value("role", "") != "assistant") continue;
    const int64_t begin = prefix_length(k, true);
    const int64_t end = k + 1 == messages.size() ? static_cast<int64_t>(out.ids.size()) : prefix_length(k + 1, false);
    if (end > begin) out.assistant_spans.emplace_back(begin, end);
  }
  return out;
}

PromptAnswer prompt_answer_tokens(const PromptTemplate& tmpl, const Tokenizer& tokenizer, const std::string& prompt,
                                  const std::string& answer, const std::string& messages_json) {
  PromptAnswer out;
  out.ids = prompt_tokens(tmpl, tokenizer, prompt, messages_json);
  out.answer_start = static_cast<int64_t>(out.ids.size());
  if (tmpl.name == "model") {
    ordered_json messages = conversation(prompt, messages_json);
    messages.push_back({{"role", "assistant"}, {"content", answer}});
    std::vector<int64_t> whole = tokenizer.encode(render_model(tmpl, messages, false));
    // The whole conversation continues the prompt as the model was trained: take it.
    if (whole.size() > out.ids.size() && std::equal(out.ids.begin(), out.ids.end(), whole.begin())) {
      out.ids = std::move(whole);
      return out;
    }
  }
  const std::vector<int64_t> answer_ids = tokenizer.encode(answer);
  out.ids.insert(out.ids.end(), answer_ids.begin(), answer_ids.end());
  out.ids.push_back(tmpl.stop_ids.empty() ? tokenizer.eos_id() : tmpl.stop_ids.front());
  return out;
}

}  // namespace areal
