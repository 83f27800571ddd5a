// What reading a dataset costs one rank: rows per second and the peak resident memory
// of the streaming reader (every row converted to its JSON object, as the trainers get
// them), and of the rows kept for training (PromptDataset: the prompts with their tokens;
// TextDataset: SFT sequences), which live on disk (record_store.h), not in memory.
//   areal_data_bench <dataset path> <label> [--prompts | --sft] [--json out.json]
// One process is one rank: the same figures hold under mpirun, where every rank reads.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "areal/data/dataset_files.h"
#include "areal/data/prompt_dataset.h"
#include "areal/data/text_dataset.h"
#include "areal/text/byte_tokenizer.h"
#include "areal/util/memory.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <dataset path> <label> [--prompts | --sft] [--json out.json]\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1], label = argv[2];
  bool prompts = false, sft = false;
  std::string json_out;
  for (int i = 3; i < argc; ++i) {
    if (std::string(argv[i]) == "--prompts") prompts = true;
    if (std::string(argv[i]) == "--sft") sft = true;
    if (std::string(argv[i]) == "--json" && i + 1 < argc) json_out = argv[++i];
  }
  const int64_t base = areal::current_rss_bytes();
  areal::reset_peak_rss();
  const auto start = std::chrono::steady_clock::now();
  int64_t rows = 0, text_bytes = 0, disk_bytes = -1;
  if (prompts) {
    areal::ByteTokenizer bytes;
    // A run with a built-in reward: the rows' other fields are not kept (a command reward keeps them).
    const areal::PromptDataset data(path, "prompt", "answer", 0, bytes, areal::prompt_template("none", bytes), "train",
                                    /*keep_rows=*/false);
    rows = static_cast<int64_t>(data.size());
    disk_bytes = static_cast<int64_t>(data.bytes_on_disk());
    for (size_t i = 0; i < data.size(); ++i) text_bytes += data[i].example.prompt.size() + data[i].example.answer.size();
  } else if (sft) {
    areal::ByteTokenizer bytes;
    const areal::TextDataset data(path, "prompt", "answer", 0, bytes, areal::prompt_template("none", bytes));
    rows = static_cast<int64_t>(data.size());
    disk_bytes = static_cast<int64_t>(data.bytes_on_disk());
    for (size_t i = 0; i < data.size(); ++i) text_bytes += data.sequence(i).ids.size();  // bytes: one token each
  } else {
    areal::for_each_dataset_row(path, "train", [&](const nlohmann::json& row, const std::string&) {
      ++rows;
      for (const auto& [key, value] : row.items())
        if (value.is_string()) text_bytes += value.get_ref<const std::string&>().size();
    });
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t peak = areal::peak_rss_bytes() - base;
  nlohmann::json out = {{"label", label},       {"rows", rows},         {"text_bytes", text_bytes},
                        {"seconds", seconds},   {"rows_per_second", rows / seconds},
                        {"peak_rss_over_start_bytes", peak}, {"row_file_bytes", disk_bytes}, {"what", prompts ? "PromptDataset" : sft ? "TextDataset" : "rows"}};
  std::printf("| %s | %s | %lld | %.1f MB | %.2f s | %.0f rows/s | %s | %s |\n", label.c_str(),
              prompts ? "prompts kept (PromptDataset)" : sft ? "SFT sequences kept (TextDataset)" : "rows streamed", static_cast<long long>(rows),
              text_bytes / 1e6, seconds, rows / seconds, areal::format_bytes(peak).c_str(),
              disk_bytes < 0 ? "-" : areal::format_bytes(disk_bytes).c_str());
  if (!json_out.empty()) std::ofstream(json_out, std::ios::app) << out.dump() << "\n";
  return 0;
}
