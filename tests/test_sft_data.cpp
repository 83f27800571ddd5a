// SFT data: text rows train on the whole text, prompt/answer rows (AReaL's SFT shape)
// and built-in tasks only on the answer and its end token, through the chat template.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "areal/data/builtin_tasks.h"
#include "areal/text/byte_tokenizer.h"
#include "areal/text/chat_template.h"
#include "areal/data/text_dataset.h"

using namespace areal;

TEST_CASE("sft data: text rows and prompt/answer rows", "[sft]") {
  const auto path = std::filesystem::temp_directory_path() / ("sft_rows_" + std::to_string(::getpid()) + ".jsonl");
  std::ofstream(path) << R"({"text": "ab"})" "\n" << R"({"q": "1+1=", "a": "2"})" "\n";
  ByteTokenizer bytes;
  const PromptTemplate none = prompt_template("none", bytes);
  TextDataset data(path.string(), "q", "a", 0, bytes, none);
  REQUIRE(data.size() == 2);
  // Text: BOS, bytes, EOS; the loss from the first byte on.
  CHECK(data.sequence(0).ids == std::vector<int64_t>{ByteTokenizer::kBos, 'a', 'b', ByteTokenizer::kEos});
  CHECK(data.sequence(0).loss_spans == std::vector<std::pair<int64_t, int64_t>>{{1, 4}});
  // Prompt/answer: the prompt as the template writes it, then the answer and EOS; the
  // loss starts at the answer.
  CHECK(data.sequence(1).ids ==
        std::vector<int64_t>{ByteTokenizer::kBos, '1', '+', '1', '=', '2', ByteTokenizer::kEos});
  CHECK(data.sequence(1).loss_spans == std::vector<std::pair<int64_t, int64_t>>{{5, 7}});
  // max_length skips and counts; a row with neither shape names both.
  TextDataset short_only(path.string(), "q", "a", 4, bytes, none);
  CHECK(short_only.size() == 1);
  CHECK(short_only.skipped() == 1);
  std::ofstream(path) << R"({"question": "x"})" "\n";
  CHECK_THROWS_WITH(TextDataset(path.string(), "q", "a", 0, bytes, none),
                    Catch::Matchers::Contains(":1: none of the known fields: 'q'") &&
                        Catch::Matchers::Contains("the row has question"));
  std::filesystem::remove(path);
}

TEST_CASE("sft data: a built-in task is prompt/answer rows (the loss on the answer only)", "[sft]") {
  ByteTokenizer bytes;
  const PromptTemplate none = prompt_template("none", bytes);
  TextDataset data("builtin:arithmetic/sloppy_teacher", "prompt", "answer", 0, bytes, none);
  const auto examples = builtin_task("builtin:arithmetic/sloppy_teacher");
  REQUIRE(data.size() == examples.size());
  for (size_t i : {size_t{0}, size_t{17}, examples.size() - 1}) {
    std::vector<int64_t> expected = {ByteTokenizer::kBos};
    for (char c : examples[i].prompt + examples[i].answer) expected.push_back(static_cast<unsigned char>(c));
    expected.push_back(ByteTokenizer::kEos);
    CHECK(data.sequence(i).ids == expected);
    const int64_t answer_start = 1 + static_cast<int64_t>(examples[i].prompt.size());
    CHECK(data.sequence(i).loss_spans ==
          std::vector<std::pair<int64_t, int64_t>>{{answer_start, static_cast<int64_t>(expected.size())}});
  }
}
