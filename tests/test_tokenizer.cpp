// The tokenizers against the Python `tokenizers` package (token for token), and the
// chat templates, prompt datasets and byte tokenizer of the RL loop.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>
#include <fstream>
#include <nlohmann/json.hpp>

#include "areal/text/bpe_tokenizer.h"
#include "areal/text/byte_tokenizer.h"
#include "areal/text/chat_template.h"
#include "areal/data/prompt_dataset.h"
#include "areal/util/error.h"
#include "areal/util/strings.h"
#include "run_python.h"
#include "test_paths.h"

using namespace areal;
using Catch::Matchers::Contains;

namespace {

const std::string kFixtures = source_path("tests/fixtures/tokenizers/");

// Unicode (composed and decomposed), digits, whitespace runs, \v and U+0085, special
// tokens inside text, contractions in both cases, code, emoji.
const std::vector<std::string> kCorpus = {
    "Hello, world! It's 2026 and we're testing 1234567 digits.",
    "Natalia sold 48 clips in April, and half as many in May. #### 72",
    "  leading spaces, trailing spaces   ",
    "tabs\t\tand\nnewlines\n\n\nand \r\n windows\r\n",
    "caf\u00e9 vs cafe\u0301 (decomposed), na\u00efve, Stra\u00dfe, \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac, \u0440\u0443\u0441\u0441\u043a\u0438\u0439",
    "\u4e2d\u6587\u5b57\u7b26 \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \ud55c\uad6d\uc5b4",
    "emoji \U0001F642\U0001F680 math \u2211 \u222b \u221a \u2264 \u00b1 \u00d7",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<s>[INST] Hi there [/INST] ok</s> <start_of_turn>user\n Hi<end_of_turn>\n<bos><eos>x",
    "I'LL SAY IT'S FINE, YOU'VE SEEN IT, he'd know, they're here",
    "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))",
    "vertical\x0btab and next\xc2\x85line",
    "\\boxed{\\frac{1}{2}} = 0.5 = 50%; 1,000,000",
    "words never seen: zyxwvut qqqq \u00ff\u00fe",
    "",
    "   ",
};

void check_parity(const std::string& name) {
  const std::string dir = kFixtures + name;
  const auto texts = std::filesystem::temp_directory_path() / ("areal_tok_" + name + ".json");
  std::ofstream(texts) << nlohmann::json(kCorpus).dump();
  PythonResult py = run_python(cat("tokenize_reference.py ", dir, "/tokenizer.json ", texts.string()));
  REQUIRE(py.exit_code == 0);
  const nlohmann::json reference = nlohmann::json::parse(py.output);
  BpeTokenizer tokenizer(dir + "/tokenizer.json");
  for (size_t i = 0; i < kCorpus.size(); ++i) {
    INFO(name << " text " << i << ": " << kCorpus[i]);
    const std::vector<int64_t> ids = tokenizer.encode(kCorpus[i]);
    CHECK(ids == reference["ids"][i].get<std::vector<int64_t>>());
    CHECK(tokenizer.decode(ids, /*skip_special=*/false) == reference["decoded"][i].get<std::string>());
  }
}

}  // namespace

TEST_CASE("BPE tokenizer: Qwen2-style tokenizer.json matches the tokenizers package token for token", "[tokenizer]") {
  check_parity("qwen2");
  BpeTokenizer tokenizer(kFixtures + "qwen2/tokenizer.json");
  CHECK(tokenizer.eos_id() == *tokenizer.token_id("<|endoftext|>"));
  CHECK(tokenizer.prompt_prefix().empty());
  // Special tokens are dropped when decoding for rewards.
  CHECK(tokenizer.decode(tokenizer.encode("<|im_start|>4<|im_end|>")) == "4");
}

TEST_CASE("BPE tokenizer: LLaMA3-style tokenizer.json (ignore_merges, digit triples, BOS template)", "[tokenizer]") {
  check_parity("llama3");
  BpeTokenizer tokenizer(kFixtures + "llama3/tokenizer.json");
  CHECK(tokenizer.eos_id() == *tokenizer.token_id("<|end_of_text|>"));
  CHECK(tokenizer.prompt_prefix() == std::vector<int64_t>{*tokenizer.token_id("<|begin_of_text|>")});
}

TEST_CASE("BPE tokenizer: SentencePiece-style files (LLaMA 2, Mistral, Gemma) and DeepSeek's match the tokenizers package",
          "[tokenizer]") {
  // Prepend + Replace normalizers (LLaMA 2), Metaspace with prepend_scheme first
  // (Mistral), Replace only (Gemma); byte_fallback for the characters outside the
  // vocabulary (the corpus has CJK, emoji, Greek, Cyrillic); their decoders. DeepSeek:
  // byte-level with an empty Sequence normalizer.
  for (const char* name : {"llama2", "mistral", "gemma", "deepseek"}) check_parity(name);
  BpeTokenizer llama2(kFixtures + "llama2/tokenizer.json");
  CHECK(llama2.prompt_prefix() == std::vector<int64_t>{*llama2.token_id("<s>")});
  CHECK(llama2.eos_id() == *llama2.token_id("</s>"));
  const std::vector<int64_t> ids = llama2.encode("\u4e2d");  // not in the vocabulary: three byte tokens
  CHECK(ids.size() == 4);  // "▁" and <0xE4> <0xB8> <0xAD>
  CHECK(ids[1] == *llama2.token_id("<0xE4>"));
}

TEST_CASE("BPE tokenizer: unsupported and malformed files are refused by name", "[tokenizer]") {
  const auto dir = std::filesystem::temp_directory_path() / "areal_bad_tokenizer";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "tokenizer.json").string();
  auto refuse = [&](const std::string& text) {
    std::ofstream(path) << text;
    try {
      BpeTokenizer t(path);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK_THAT(refuse(R"({"model": {"type": "WordPiece", "vocab": {}}})"),
             Contains(path) && Contains("'WordPiece' is not supported"));
  CHECK_THAT(refuse(R"({"model": {"type": "Unigram", "vocab": []}})"), Contains("'Unigram' is not supported"));
  CHECK_THAT(refuse(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                       "pre_tokenizer": {"type": "Whitespace"}})"),
             Contains("pre-tokenizer 'Whitespace' is not supported (Split, ByteLevel, Metaspace)"));
  CHECK_THAT(refuse(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                       "decoder": {"type": "WordPiece"}})"),
             Contains("decoder 'WordPiece' is not supported (Replace, ByteFallback, Fuse, Strip, Metaspace)"));
  CHECK_THAT(refuse(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                       "normalizer": {"type": "Replace", "pattern": {"Regex": " +"}, "content": "_"}})"),
             Contains("Replace with a regex pattern is not supported"));
  CHECK_THAT(refuse("{not json"), Contains("not a JSON object"));
  CHECK_THAT(refuse(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "normalizer": {"type": "NFKC"},
                       "pre_tokenizer": {"type": "ByteLevel"}})"),
             Contains("normalizer 'NFKC' is not supported"));
  CHECK_THAT(refuse(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}})"),
             Contains("no end-of-sequence token"));
  std::string missing;
  try {
    load_tokenizer("/no/such/tokenizer.json", "");
  } catch (const ConfigError& e) {
    missing = e.what();
  }
  CHECK_THAT(missing, Contains("'/no/such/tokenizer.json' does not exist"));
}

TEST_CASE("load_tokenizer: byte by name or by default, tokenizer.json from a directory", "[tokenizer]") {
  CHECK(dynamic_cast<ByteTokenizer*>(load_tokenizer("byte", "").get()));
  CHECK(dynamic_cast<ByteTokenizer*>(load_tokenizer("", "").get()));
  CHECK(dynamic_cast<BpeTokenizer*>(load_tokenizer(kFixtures + "qwen2", "").get()));
  CHECK(dynamic_cast<BpeTokenizer*>(load_tokenizer("", kFixtures + "llama3").get()));
}

TEST_CASE("byte tokenizer: bytes in, bytes out, BOS before plain prompts", "[tokenizer]") {
  ByteTokenizer t;
  CHECK(t.encode("1+2=") == std::vector<int64_t>{'1', '+', '2', '='});
  CHECK(t.encode_document("ab") == std::vector<int64_t>{ByteTokenizer::kBos, 'a', 'b', ByteTokenizer::kEos});
  CHECK(t.decode({ByteTokenizer::kBos, '4', '2', ByteTokenizer::kEos}) == "42");
  CHECK(t.decode({'4', ByteTokenizer::kEos}, false) == "4<eos>");
  CHECK(t.prompt_prefix() == std::vector<int64_t>{ByteTokenizer::kBos});
}

TEST_CASE("chat templates: Qwen ChatML and LLaMA 3 headers as the models' own templates write them", "[tokenizer]") {
  BpeTokenizer qwen(kFixtures + "qwen2/tokenizer.json");
  PromptTemplate chatml = prompt_template("qwen", qwen);
  CHECK(chatml.stop_ids == std::vector<int64_t>{*qwen.token_id("<|im_end|>")});
  CHECK(qwen.decode(prompt_tokens(chatml, qwen, "What is 2+2?"), false) ==
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
  BpeTokenizer llama(kFixtures + "llama3/tokenizer.json");
  PromptTemplate headers = prompt_template("llama3", llama);
  CHECK(headers.stop_ids == std::vector<int64_t>{*llama.token_id("<|eot_id|>")});
  CHECK(llama.decode(prompt_tokens(headers, llama, "Hi"), false) ==
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // A template needs its special tokens.
  ByteTokenizer bytes;
  CHECK_THROWS_WITH(prompt_template("qwen", bytes), Contains("no token '<|im_start|>'"));
  CHECK_THROWS_WITH(prompt_template("llama3", qwen), Contains("no token '<|begin_of_text|>'"));
  PromptTemplate none = prompt_template("none", bytes);
  CHECK(prompt_tokens(none, bytes, "1+1=") == std::vector<int64_t>{ByteTokenizer::kBos, '1', '+', '1', '='});
}

TEST_CASE("prompt dataset: JSONL with configurable keys, length limit, errors with line numbers", "[tokenizer][data]") {
  const auto path = std::filesystem::temp_directory_path() / "areal_prompts.jsonl";
  ByteTokenizer bytes;
  PromptTemplate none = prompt_template("none", bytes);
  std::ofstream(path) << R"({"question": "1+1=", "solution": "2"})" "\n\n"
                      << R"({"question": "a much longer prompt", "solution": 7})" "\n";
  PromptDataset data(path.string(), "question", "solution", 10, bytes, none);
  REQUIRE(data.size() == 1);
  CHECK(data.skipped() == 1);
  CHECK(data[0].example.answer == "2");
  CHECK(data[0].ids.size() == 5);
  PromptDataset all(path.string(), "question", "solution", 0, bytes, none);
  CHECK(all[1].example.answer == "7");  // numbers are answers too

  std::ofstream(path) << R"({"question": "1+1=", "solution": "2"})" "\n" << "{broken\n";
  CHECK_THROWS_WITH(PromptDataset(path.string(), "question", "solution", 0, bytes, none),
                    Contains(path.string() + ":2: not a JSON object"));
  std::ofstream(path) << R"({"prompt": "1+1="})" "\n";
  CHECK_THROWS_WITH(PromptDataset(path.string(), "prompt", "answer", 0, bytes, none),
                    Contains(":1: no field 'answer'"));
  CHECK_THROWS_WITH(PromptDataset("/no/such/file.jsonl", "prompt", "answer", 0, bytes, none),
                    Contains("/no/such/file.jsonl: cannot read"));
}

TEST_CASE("built-in arithmetic task: fixed disjoint splits, true sums, and the sloppy teacher", "[data]") {
  auto train = builtin_task("builtin:arithmetic/train"), test = builtin_task("builtin:arithmetic/test");
  CHECK(train.size() == 9500);
  CHECK(test.size() == 500);
  std::set<std::string> train_prompts;
  for (const auto& e : train) train_prompts.insert(e.prompt);
  for (const auto& e : test) CHECK(train_prompts.count(e.prompt) == 0);
  for (const auto& e : test) {
    const int a = std::stoi(e.prompt), b = std::stoi(e.prompt.substr(e.prompt.find('+') + 1));
    CHECK(e.answer == std::to_string(a + b));
  }
  auto sloppy = builtin_task("builtin:arithmetic/sloppy_teacher");
  REQUIRE(sloppy.size() == train.size());
  int carries = 0, forgotten = 0;
  for (size_t i = 0; i < train.size(); ++i) {
    REQUIRE(sloppy[i].prompt == train[i].prompt);
    const int a = std::stoi(train[i].prompt), b = std::stoi(train[i].prompt.substr(train[i].prompt.find('+') + 1));
    if (a % 10 + b % 10 < 10 && a / 10 + b / 10 < 10) {
      CHECK(sloppy[i].answer == train[i].answer);  // no carry: nothing to forget
      continue;
    }
    ++carries;
    if (sloppy[i].answer != train[i].answer) ++forgotten;
  }
  CHECK(forgotten == Approx(0.6 * carries).epsilon(0.05));
  CHECK_THROWS_WITH(builtin_task("builtin:nope"), Contains("unknown built-in dataset 'builtin:nope'"));
}

TEST_CASE("built-in multiplication task: true products, disjoint splits, and the tool teacher's two habits") {
  const auto train = builtin_task("builtin:multiplication/train"), test = builtin_task("builtin:multiplication/test");
  const auto teacher = builtin_task("builtin:multiplication/tool_teacher");
  REQUIRE(train.size() == 10000);
  REQUIRE(test.size() == 500);
  REQUIRE(teacher.size() == train.size());
  std::set<std::string> train_prompts;
  for (const auto& e : train) {
    const int a = std::stoi(e.prompt.substr(0, 3)), b = std::stoi(e.prompt.substr(4, 3));
    CHECK(e.prompt == std::to_string(a) + "*" + std::to_string(b) + "=");
    CHECK(e.answer == std::to_string(a * b));
    train_prompts.insert(e.prompt);
  }
  CHECK(train_prompts.size() == train.size());  // no problem twice
  for (const auto& e : test) CHECK(train_prompts.count(e.prompt) == 0);  // held out
  int calls = 0;
  for (size_t i = 0; i < train.size(); ++i) {
    const std::string call = train[i].prompt.substr(0, 7);
    if (teacher[i].answer.rfind("<calc>", 0) == 0) {
      ++calls;
      CHECK(teacher[i].answer == "<calc>" + call + "</calc>" + train[i].answer + "\n" + train[i].answer);
    } else {
      CHECK(teacher[i].answer != train[i].answer);  // a guess: wrong
      CHECK(teacher[i].answer.substr(0, 2) == train[i].answer.substr(0, 2));  // with the right leading digits
    }
  }
  CHECK(calls == Approx(0.2 * 10000).epsilon(0.1));
}
