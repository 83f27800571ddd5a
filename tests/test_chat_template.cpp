// Real models' own chat templates (tests/fixtures/chat_templates) rendered by the
// production path (a tokenizer folder's template, ModelChatTemplate, the BPE tokenizer)
// against transformers' AutoTokenizer.apply_chat_template on the same folder: the same
// text byte for byte and the same token ids, or an error on both sides.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "areal/data/prompt_dataset.h"
#include "areal/data/text_dataset.h"
#include "areal/text/jinja_value.h"
#include "areal/text/bpe_tokenizer.h"
#include "areal/text/chat_template.h"
#include "areal/util/error.h"
#include "areal/util/strings.h"
#include "run_binary.h"
#include "run_python.h"
#include "test_paths.h"

using namespace areal;
using Catch::Matchers::Contains;
using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

struct TemplateCase {
  std::string file;       // under tests/fixtures/chat_templates
  std::string tokenizer;  // under tests/fixtures/tokenizers
  std::string bos, eos;
};

// The tokenizer fixtures stand in for each family's tokenizer: byte-level Qwen (ChatML) and
// LLaMA 3 ones, SentencePiece-style Gemma (with its turn tokens) and Mistral ones; other
// markers ([INST], DeepSeek's) are plain text to them.
const std::vector<TemplateCase> kTemplates = {
    {"Qwen-Qwen2.5-7B-Instruct.jinja", "qwen2", "<|endoftext|>", "<|im_end|>"},
    {"Qwen-Qwen3-0.6B.jinja", "qwen2", "<|endoftext|>", "<|im_end|>"},
    {"Qwen-QwQ-32B.jinja", "qwen2", "<|endoftext|>", "<|im_end|>"},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "qwen2", "<|endoftext|>", "<|im_end|>"},
    {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "llama3", "<|begin_of_text|>", "<|eot_id|>"},
    {"meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3", "<|begin_of_text|>", "<|eot_id|>"},
    {"meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3", "<|begin_of_text|>", "<|eot_id|>"},
    {"google-gemma-2-2b-it.jinja", "gemma", "<bos>", "<eos>"},
    {"google-gemma-3-it.jinja", "gemma", "<bos>", "<eos>"},
    {"mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral", "<s>", "</s>"},
    {"Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral", "<s>", "</s>"},
};

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "description": "The weather of a city", "parameters": {"type": "object",
  "properties": {"city": {"type": "string", "description": "The city's name"}}, "required": ["city"]}}}])");

// With and without a system message, several turns, reasoning in an earlier answer,
// tool calls and tool messages, Unicode and whitespace.
const std::vector<json> kConversations = {
    json::parse(R"([{"role": "user", "content": "What is 2+2? Put the answer in \\boxed{}."}])"),
    json::parse(R"([{"role": "system", "content": "You are a careful math tutor."},
                    {"role": "user", "content": "Ünïcödé question:  3 × 4 = ?\n\nThink step by step."}])"),
    json::parse(R"([{"role": "system", "content": "  Be brief.  "}, {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello! How can I help?"},
                    {"role": "user", "content": "Solve x + 1 = 2."}])"),
    json::parse(R"([{"role": "user", "content": "q1"},
                    {"role": "assistant", "content": "<think>\nlet me think\n</think>\n\nThe answer is 4."},
                    {"role": "user", "content": "q2"}])"),
    json::parse(R"([{"role": "user", "content": "What's the weather in Paris?"},
                    {"role": "assistant", "content": "", "tool_calls": [{"id": "call12345", "type": "function",
                      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                    {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "call12345"}])"),
};

// A tokenizer folder as a model ships it: tokenizer.json, tokenizer_config.json with the
// special tokens, and the template in chat_template.jinja or tokenizer_config.json.
std::string model_folder(const TemplateCase& t, bool template_in_config) {
  const fs::path dir = fs::temp_directory_path() / "areal_chat_templates" / (t.file + (template_in_config ? ".cfg" : ""));
  fs::create_directories(dir);
  fs::copy_file(source_path("tests/fixtures/tokenizers/" + t.tokenizer + "/tokenizer.json"), dir / "tokenizer.json",
                fs::copy_options::overwrite_existing);
  std::ifstream in(source_path("tests/fixtures/chat_templates/" + t.file), std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  json config = {{"tokenizer_class", "PreTrainedTokenizerFast"}, {"bos_token", t.bos}, {"eos_token", t.eos}};
  fs::remove(dir / "chat_template.jinja");
  if (template_in_config) config["chat_template"] = text;
  else std::ofstream(dir / "chat_template.jinja", std::ios::binary) << text;
  std::ofstream(dir / "tokenizer_config.json") << config.dump(2);
  return dir.string();
}

}  // namespace

TEST_CASE("chat templates: real models' templates render and tokenize exactly as transformers does", "[python]") {
  json cases = json::array();
  struct Ours {
    std::string folder;
    json messages, kwargs;
    bool generation;
  };
  std::vector<Ours> ours;
  for (size_t t = 0; t < kTemplates.size(); ++t) {
    const std::string folder = model_folder(kTemplates[t], /*template_in_config=*/t % 2 == 1);
    for (const json& messages : kConversations)
      for (bool generation : {true, false})
        for (const json& kwargs : {json::object(), json{{"enable_thinking", false}}, json{{"enable_thinking", true}}}) {
          json all = kwargs;
          if (messages.back().value("role", "") == "tool") all["tools"] = kTools;
          cases.push_back({{"model_dir", folder}, {"messages", messages}, {"add_generation_prompt", generation},
                           {"kwargs", all}});
          ours.push_back({folder, messages, all, generation});
        }
  }
  const fs::path cases_file = fs::temp_directory_path() / "areal_chat_templates" / "cases.json";
  std::ofstream(cases_file) << cases.dump();
  PythonResult py = run_python("render_chat_template.py " + cases_file.string());
  REQUIRE(py.exit_code == 0);
  const json expected = json::parse(py.output.substr(py.output.find('[')));
  REQUIRE(expected.size() == ours.size());
  int rendered = 0, refused = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    INFO("case " << i << ": " << cases[i].dump());
    auto tmpl = ModelChatTemplate::load(ours[i].folder);
    REQUIRE(tmpl);
    BpeTokenizer tokenizer(ours[i].folder + "/tokenizer.json");
    std::string text, error;
    try {
      text = tmpl->render(ours[i].messages.dump(), ours[i].generation, ours[i].kwargs.dump());
    } catch (const jinja::JinjaError& e) {
      error = e.what();
    }
    if (expected[i].contains("error")) {
      INFO("transformers: " << expected[i]["error"].get<std::string>() << "\nours: " << text);
      CHECK_FALSE(error.empty());
      ++refused;
      continue;
    }
    INFO("our error: " << error);
    CHECK(text == expected[i]["text"].get<std::string>());
    CHECK(tokenizer.encode(text) == expected[i]["ids"].get<std::vector<int64_t>>());
    ++rendered;
  }
  // Gemma refuses system messages and tool roles, Mistral-Nemo a system message
  // before an assistant turn, ...: both sides must, but most cases render.
  CHECK(rendered > 3 * refused);
}

TEST_CASE("chat templates: chat_template auto takes the model's own, with generation_config's end-of-turn ids") {
  const TemplateCase llama = kTemplates[5];
  const std::string folder = model_folder(llama, false);
  BpeTokenizer tokenizer(folder + "/tokenizer.json");
  std::ofstream(folder + "/generation_config.json") << R"({"eos_token_id": [7, 8, 9]})";
  PromptTemplate tmpl = prompt_template("auto", tokenizer, folder);
  CHECK(tmpl.name == "model");
  CHECK(tmpl.stop_ids == std::vector<int64_t>{7, 8, 9});
  const std::string text = prompt_text(tmpl, tokenizer, "Hi");
  CHECK(text == "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December "
                "2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
  CHECK(prompt_tokens(tmpl, tokenizer, "Hi") == tokenizer.encode(text));
  // A list of messages is rendered only by the model's template.
  const std::string messages = R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])";
  CHECK_THAT(prompt_text(tmpl, tokenizer, "", messages), Contains("\n\nS<|eot_id|>"));
  CHECK_THROWS_WITH(prompt_text(prompt_template("none", tokenizer), tokenizer, "", messages),
                    Contains("which chat_template none cannot render"));
  // SFT: the answer is the assistant's turn as the template writes it.
  PromptAnswer pa = prompt_answer_tokens(tmpl, tokenizer, "Hi", "Hello");
  CHECK(tokenizer.decode(std::vector<int64_t>(pa.ids.begin() + pa.answer_start, pa.ids.end()), false) ==
        "Hello<|eot_id|>");

  // No template in the folder: auto is none, model an error naming the folder.
  fs::remove(folder + "/chat_template.jinja");
  CHECK(prompt_template("auto", tokenizer, folder).name == "none");
  CHECK_THROWS_WITH(prompt_template("model", tokenizer, folder), Contains("has no chat template"));
  // A template that does not parse: an error naming the file and line.
  std::ofstream(folder + "/chat_template.jinja") << "{{ messages }}\n{% if %}";
  CHECK_THROWS_WITH(prompt_template("auto", tokenizer, folder), Contains("chat_template.jinja line 2: "));
}

TEST_CASE("chat templates: a dataset's messages go through the model's template, and a failing one names the prompt") {
  const std::string folder = model_folder(kTemplates[7], false);  // Gemma 2: refuses a system message
  BpeTokenizer tokenizer(folder + "/tokenizer.json");
  const PromptTemplate tmpl = prompt_template("auto", tokenizer, folder);
  const fs::path data = fs::temp_directory_path() / "areal_chat_templates" / "messages.jsonl";
  std::ofstream(data) << R"({"messages": [{"role": "user", "content": "2+2?"}], "answer": "4"})" << "\n";
  PromptDataset prompts(data.string(), "messages", "answer", 0, tokenizer, tmpl);
  CHECK(tokenizer.decode(prompts[0].ids, false) == "<bos><start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n");
  std::ofstream(data, std::ios::app)
      << R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], "answer": "4"})" << "\n";
  CHECK_THROWS_WITH(PromptDataset(data.string(), "messages", "answer", 0, tokenizer, tmpl),
                    Contains("messages.jsonl: prompt 2: the chat template failed: ") &&
                        Contains("line 1: the template raised: System role not supported"));
}

TEST_CASE("chat templates: SFT on a conversation trains every assistant turn and nothing else") {
  const std::string conversation = R"([{"role": "system", "content": "S"}, {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"},
    {"role": "assistant", "content": "6"}])";
  // Each family's template: the turns' tokens are the assistant's text and its end of turn.
  for (const auto& [t, end_of_turn] : std::vector<std::pair<TemplateCase, std::string>>{
           {kTemplates[0], "<|im_end|>\n"}, {kTemplates[5], "<|eot_id|>"}}) {
    INFO(t.file);
    const std::string folder = model_folder(t, false);
    BpeTokenizer tokenizer(folder + "/tokenizer.json");
    const PromptTemplate tmpl = prompt_template("model", tokenizer, folder);
    const ConversationTokens c = conversation_tokens(tmpl, tokenizer, conversation);
    CHECK(c.ids == tokenizer.encode(tmpl.model->render(conversation, false, "{}")));  // the whole, as rendered
    REQUIRE(c.assistant_spans.size() == 2);
    auto text_of = [&](int64_t begin, int64_t end) {
      return tokenizer.decode(std::vector<int64_t>(c.ids.begin() + begin, c.ids.begin() + end), false);
    };
    CHECK(text_of(c.assistant_spans[0].first, c.assistant_spans[0].second) == "4" + end_of_turn);
    CHECK(text_of(c.assistant_spans[1].first, c.assistant_spans[1].second) == "6" + end_of_turn);
    // What lies between them is the user's turn and the next generation prompt, untrained.
    CHECK_THAT(text_of(c.assistant_spans[0].second, c.assistant_spans[1].first), Contains("and 3+3?"));
    // Through a dataset row: the same sequence and spans (the single-turn path is unchanged).
    const fs::path data = fs::temp_directory_path() / "areal_chat_templates" / "conversation.jsonl";
    std::ofstream(data) << json{{"messages", json::parse(conversation)}}.dump() << "\n";
    const SftSequence row = TextDataset(data.string(), "prompt", "answer", 0, tokenizer, tmpl).sequence(0);
    CHECK(row.ids == c.ids);
    CHECK(row.loss_spans == c.assistant_spans);
  }
  // The built-in templates cannot render a list of messages: named.
  BpeTokenizer qwen(source_path("tests/fixtures/tokenizers/qwen2/tokenizer.json"));
  CHECK_THROWS_WITH(conversation_tokens(prompt_template("qwen", qwen), qwen, conversation),
                    Contains("needs the model's chat template (chat_template: model), not qwen"));
}

TEST_CASE("binary: --job preview prints the prompts as the rollout feeds them, through the model's template",
          "[binary]") {
  // The CI smoke model with Qwen3's template beside its tokenizer.
  const fs::path model = fs::temp_directory_path() / "areal_preview_model";
  fs::remove_all(model);
  fs::copy(source_path("tests/fixtures/models/tiny_chat"), model);
  fs::copy_file(source_path("tests/fixtures/chat_templates/Qwen-Qwen3-0.6B.jinja"), model / "chat_template.jinja");
  const fs::path data = model / "prompts.jsonl";
  std::ofstream(data) << R"({"messages": [{"role": "user", "content": "2+2?"}], "answer": "4"})" << "\n"
                      << R"({"question": "unused", "messages": [{"role": "system", "content": "Be brief."},)"
                      << R"( {"role": "user", "content": "3+3?"}], "answer": "6"})" << "\n";
  const std::string command = train_bin() + " --job preview --model_path " + model.string() +
                              " --train_dataset.path " + data.string() + " --train_dataset.prompt_key messages";
  Result r = run(command);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.stdout_only, Contains("chat_template: the model's own (" + (model / "chat_template.jinja").string()));
  CHECK_THAT(r.stdout_only, Contains("2 prompts (0 longer than train_dataset.max_length skipped)"));
  const std::string first = "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
  BpeTokenizer tokenizer((model / "tokenizer.json").string());
  CHECK_THAT(r.stdout_only, Contains(cat("=== prompt 1 of 2: ", tokenizer.encode(first).size(), " tokens ===\n", first)));
  CHECK_THAT(r.stdout_only, Contains("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n3+3?"));
  // preview_prompts: only that many are shown.
  Result one = run(command + " --preview_prompts 1");
  CHECK_THAT(one.stdout_only, Contains("=== prompt 1 of 2"));
  CHECK_THAT(one.stdout_only, !Contains("=== prompt 2 of 2"));
  // enable_thinking: Qwen3's template leaves the empty thinking block out.
  Result thinking = run(command + " --enable_thinking true");
  CHECK_THAT(thinking.stdout_only, Contains("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n\n---"));

  // A template that refuses a prompt: exit 2 naming the file, the prompt and the reason.
  fs::copy_file(source_path("tests/fixtures/chat_templates/google-gemma-2-2b-it.jinja"), model / "chat_template.jinja",
                fs::copy_options::overwrite_existing);
  Result refused = run(command);
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.output, Contains("prompts.jsonl: prompt 2: the chat template failed: ") &&
                                 Contains("the template raised: System role not supported"));
}
