// Datasets as users have them (dataset_files.h, row_schema.h): parquet, Arrow, Hugging
// Face download folders, save_to_disk folders and veRL's parquet give the same prompts
// and answers as the same rows in JSONL (tests/fixtures/datasets, written by pyarrow:
// make_datasets.py), and every bad input is refused naming the file, row and field.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "areal/data/dataset_files.h"
#include "areal/data/prompt_dataset.h"
#include "areal/data/record_store.h"
#include "areal/data/row_schema.h"
#include "areal/data/text_dataset.h"
#include "areal/text/byte_tokenizer.h"
#include "run_binary.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using namespace areal;
using Catch::Matchers::Contains;

namespace {

const std::string kData = "tests/fixtures/datasets/";

PromptDataset prompts(const std::string& relative, const std::string& split = "train",
                      const std::string& prompt_key = "prompt") {
  static ByteTokenizer bytes;
  static PromptTemplate none = prompt_template("none", bytes);
  const std::string path = relative.starts_with("/") ? relative : source_path(relative);
  return PromptDataset(path, prompt_key, "answer", 0, bytes, none, split);
}

// The rows read as RL examples, without tokenizing (chat messages need a model's template).
std::vector<PromptExample> examples(const std::string& relative, const std::string& split = "train") {
  std::vector<PromptExample> out;
  for_each_dataset_row(source_path(relative), split, [&](const nlohmann::json& row, const std::string& where) {
    out.push_back(rl_example(row, where, "prompt", "answer"));
  });
  return out;
}

// The same prompts, answers, messages and rows, in the same order.
void check_same(const std::vector<PromptExample>& a, const std::vector<PromptExample>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("row " << i + 1);
    CHECK(a[i].prompt == b[i].prompt);
    CHECK(a[i].answer == b[i].answer);
    CHECK(a[i].messages_json == b[i].messages_json);
    CHECK(a[i].row_json == b[i].row_json);
  }
}
void check_same(const PromptDataset& a, const PromptDataset& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("row " << i + 1);
    CHECK(a[i].example.prompt == b[i].example.prompt);
    CHECK(a[i].example.answer == b[i].example.answer);
    CHECK(a[i].example.row_json == b[i].example.row_json);
    CHECK(a[i].ids == b[i].ids);
  }
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::string temp_file(const std::string& name, const std::string& content) {
  const fs::path path = fs::temp_directory_path() / ("areal_ds_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(path) << content;
  return path.string();
}

}  // namespace

TEST_CASE("datasets: a GSM8K download reads by split and config as the same rows in JSONL", "[data]") {
  const PromptDataset train = prompts(kData + "gsm8k"), test = prompts(kData + "gsm8k", "test");
  check_same(train, prompts(kData + "gsm8k_train.jsonl"));
  check_same(test, prompts(kData + "gsm8k_test.jsonl"));
  // The schema by fields: AReaL's prompt (question + its \boxed{} suffix, one user
  // turn) and the final number after ####.
  CHECK(train[0].example.prompt == "Tom has 3 boxes with 12 pencils in each box. He gives away 9 pencils. How many "
                                   "pencils does he have left?" + std::string(kBoxedAnswerSuffix));
  CHECK(train[0].example.answer == "27");
  // Config folders: main is taken over socratic; a path into one config reads that one.
  const PromptDataset socratic = prompts(kData + "gsm8k/socratic");
  CHECK_THAT(socratic[0].example.prompt, Contains("(socratic)"));
  // A single shard file, by its name.
  check_same(prompts(kData + "gsm8k/main/test-00000-of-00001.parquet"), test);
  // The files a folder resolves to, in order.
  const std::vector<DataFile> files = dataset_files(source_path(kData + "gsm8k"), "test");
  REQUIRE(files.size() == 1);
  CHECK(files[0].format == DataFormat::Parquet);
  CHECK_THAT(files[0].path, Contains("main/test-00000-of-00001.parquet"));
}

TEST_CASE("datasets: save_to_disk folders (DatasetDict and Dataset) read as the same rows", "[data]") {
  check_same(prompts(kData + "saved_dict"), prompts(kData + "gsm8k_train.jsonl"));
  check_same(examples(kData + "saved_dict", "test"), examples(kData + "gsm8k_test.jsonl"));
  check_same(prompts(kData + "saved_dict", "test"), prompts(kData + "gsm8k_test.jsonl"));
  check_same(prompts(kData + "saved_one", "anything"), prompts(kData + "gsm8k_test.jsonl"));  // one Dataset: no splits
  check_same(prompts(kData + "saved_one/data-00000-of-00001.arrow"), prompts(kData + "gsm8k_test.jsonl"));
}

TEST_CASE("datasets: veRL's parquet and MATH-style rows read as their JSONL", "[data]") {
  const std::vector<PromptExample> verl = examples(kData + "verl");
  check_same(verl, examples(kData + "verl_train.jsonl"));
  CHECK(verl[0].answer == "27");  // reward_model.ground_truth
  CHECK_THAT(verl[0].prompt, Contains("Let's think step by step."));  // the user message of `prompt`
  CHECK(nlohmann::json::parse(verl[0].messages_json)[0]["role"] == "user");  // the model's template renders it
  CHECK(nlohmann::json::parse(verl[0].row_json)["data_source"] == "openai/gsm8k");  // for reward commands
  const PromptDataset math = prompts(kData + "math");
  check_same(math, prompts(kData + "math_train.jsonl"));
  CHECK(math[0].example.answer == "27");  // the last \boxed{}
}

TEST_CASE("datasets: the rows kept for training live in an unlinked file under TMPDIR and read back whole", "[data]") {
  const fs::path folder = fs::temp_directory_path() / ("areal_ds_tmpdir_" + std::to_string(::getpid()));
  fs::create_directories(folder);
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", folder.c_str(), 1);
  {
    RecordStore store;
    // Records across the 1 MiB write buffer: some read from the file, the last from memory.
    std::vector<std::vector<char>> records;
    for (int i = 0; i < 300; ++i) records.push_back(std::vector<char>(static_cast<size_t>(i) * 37 + 1, static_cast<char>(i)));
    for (const auto& r : records) store.append(r);
    REQUIRE(store.size() == records.size());
    for (size_t i = 0; i < records.size(); ++i) CHECK(store.read(i) == records[i]);
    CHECK(fs::is_empty(folder));  // unlinked: nothing is left behind, however the process ends
    // Reward and environment workers (fork + exec) do not inherit the file.
    CHECK_THAT(run("ls -l /proc/self/fd").output, !Contains("areal-dataset"));
    // A dataset's prompts read back as they were built: the examples and their tokens.
    const PromptDataset data = prompts(kData + "gsm8k_test.jsonl");
    const std::vector<PromptExample> rows = examples(kData + "gsm8k_test.jsonl");
    ByteTokenizer bytes;
    REQUIRE(data.size() == rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      CHECK(data[i].example.row_json == rows[i].row_json);
      CHECK(data[i].ids == prompt_tokens(prompt_template("none", bytes), bytes, rows[i].prompt));
    }
    // Without a command reward or environment the rows' other fields are not kept.
    const PromptDataset lean(source_path(kData + "gsm8k_test.jsonl"), "prompt", "answer", 0, bytes,
                             prompt_template("none", bytes), "train", /*keep_rows=*/false);
    REQUIRE(lean.size() == data.size());
    CHECK(lean.bytes_on_disk() < data.bytes_on_disk());
    for (size_t i = 0; i < lean.size(); ++i) {
      CHECK(lean[i].example.row_json.empty());
      CHECK(lean[i].example.prompt == data[i].example.prompt);
      CHECK(lean[i].example.answer == data[i].example.answer);
      CHECK(lean[i].ids == data[i].ids);
    }
  }
  ::setenv("TMPDIR", (folder / "missing").c_str(), 1);
  CHECK_THROWS_WITH(RecordStore(), Contains("cannot make the dataset's row file in " + (folder / "missing").string()) &&
                                       Contains("set TMPDIR"));
  if (old) ::setenv("TMPDIR", saved.c_str(), 1);
  else ::unsetenv("TMPDIR");
  fs::remove_all(folder);
}

TEST_CASE("datasets: chat messages and the SFT shapes", "[data]") {
  const nlohmann::json chat = {{"messages",
                                {{{"role", "system"}, {"content", "Be brief."}},
                                 {{"role", "user"}, {"content", "2+2?"}},
                                 {{"role", "assistant"}, {"content", "4"}}}}};
  const PromptExample rl = rl_example(chat, "x:1", "prompt", "answer");
  CHECK(rl.prompt == "2+2?");
  CHECK(rl.answer == "4");
  CHECK(nlohmann::json::parse(rl.messages_json).size() == 2);  // the turn to answer is left out
  const SftExample sft = sft_example(chat, "x:1", "prompt", "answer");
  CHECK(sft.answer == "4");
  CHECK(nlohmann::json::parse(sft.messages_json).size() == 2);
  const SftExample gsm8k = sft_example({{"question", "q"}, {"answer", "a\n#### 1"}}, "x:1", "prompt", "answer");
  CHECK(gsm8k.prompt == "q");
  CHECK(gsm8k.answer == "a\n#### 1");  // SFT trains on the whole solution, as AReaL's loader
  // SFT from a download folder: the same sequences as the JSONL.
  ByteTokenizer bytes;
  const PromptTemplate none = prompt_template("none", bytes);
  TextDataset folder(source_path(kData + "gsm8k"), "prompt", "answer", 0, bytes, none, "test");
  TextDataset jsonl(source_path(kData + "gsm8k_test.jsonl"), "prompt", "answer", 0, bytes, none);
  REQUIRE(folder.size() == jsonl.size());
  for (size_t i = 0; i < folder.size(); ++i) CHECK(folder.sequence(i).ids == jsonl.sequence(i).ids);
}

TEST_CASE("datasets: bad input names the file, the row and the field", "[data][python]") {
  // A split the folder does not have: the splits it has.
  CHECK_THAT(error_of([] { prompts(kData + "gsm8k", "validation"); }),
             Contains("no split 'validation'") && Contains("test, train"));
  CHECK_THAT(error_of([] { prompts(kData + "saved_dict", "validation"); }),
             Contains("no split 'validation' in the saved DatasetDict (it has train, test"));
  // Not parquet, not Arrow.
  const std::string junk = temp_file("junk.parquet", "this is not parquet\n");
  CHECK_THAT(error_of([&] { prompts(junk); }), Contains(junk) && Contains("not a parquet file"));
  const std::string junk_arrow = temp_file("junk.arrow", "nor Arrow\n");
  CHECK_THAT(error_of([&] { prompts(junk_arrow); }), Contains(junk_arrow) && Contains("not an Arrow file"));
  // No known schema: the fields the row has.
  const std::string odd = temp_file("odd.jsonl", "{\"query\": \"x\", \"label\": 1}\n");
  CHECK_THAT(error_of([&] { prompts(odd); }),
             Contains(odd + ":1: none of the known fields") && Contains("the row has label, query"));
  // A null where a string is needed, from parquet: the file, its row, the field.
  const fs::path nulls = fs::temp_directory_path() / ("areal_ds_nulls_" + std::to_string(::getpid()) + ".parquet");
  REQUIRE(run(python_bin() + " -c \"import pyarrow as pa, pyarrow.parquet as pq; pq.write_table(pa.table("
              "{'question': ['a', None], 'answer': ['#### 1', '#### 2']}), '" + nulls.string() + "')\"")
              .exit_code == 0);
  CHECK_THAT(error_of([&] { prompts(nulls.string()); }),
             Contains(nulls.string() + ": row 2: field 'question' is null (a string is needed)"));
  CHECK_THAT(error_of([] { prompts(kData + "no_such_folder"); }), Contains("no such file or folder"));
  // A GSM8K answer without its final answer.
  CHECK_THAT(error_of([] { rl_example({{"question", "q"}, {"answer", "no number"}}, "f:3", "prompt", "answer"); }),
             Contains("f:3: field 'answer' has no final answer after '####'"));
  for (const char* f : {"junk.parquet", "junk.arrow", "odd.jsonl"})
    fs::remove(fs::temp_directory_path() / ("areal_ds_" + std::to_string(::getpid()) + "_" + f));
  fs::remove(nulls);
}

TEST_CASE("datasets: a bad dataset exits 2 before the init, naming the option and the file", "[data][binary]") {
  const std::string junk = temp_file("bad.parquet", "PAR1 but not really\n");
  Result r = run(train_bin() + " --job rl --init_from_scratch true --train_dataset.path " + junk +
                 " --cluster.fileroot " + (fs::temp_directory_path() / "areal_ds_bin").string());
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("option 'train_dataset.path'") && Contains(junk) && Contains("not a parquet file"));
  fs::remove(junk);
}

TEST_CASE("datasets: train_dataset.split picks a download's split through the binary", "[data][binary]") {
  const std::string preview = train_bin() + " --job preview --model_path " +
                              source_path("tests/fixtures/models/tiny_chat") + " --train_dataset.path " +
                              source_path(kData + "gsm8k") + " --preview_prompts 1";
  Result train = run(preview);
  INFO(train.output);
  CHECK(train.exit_code == 0);
  CHECK_THAT(train.output, Contains("gsm8k: 8 prompts"));
  Result test = run(preview + " --train_dataset.split test");
  INFO(test.output);
  CHECK(test.exit_code == 0);
  CHECK_THAT(test.output, Contains("gsm8k: 2 prompts"));
  Result missing = run(preview + " --train_dataset.split validation");
  INFO(missing.output);
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.output, Contains("option 'train_dataset.path'") && Contains("no split 'validation'"));
}
