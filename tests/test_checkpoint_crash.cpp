// A crash at any instant of a checkpoint save leaves a complete checkpoint under the
// final name, the previous one or the new one, with every file (weights, LoRA adapters,
// tokenizer); the next run removes what the crashed save left beside it. The crash is
// injected at named points of the save (AREAL_TEST_CRASH_AT, util/crash_point.h) in
// the real binary: an SFT run with LoRA on the tiny chat model, which has a tokenizer.
#include "catch_with_torch.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "areal/util/crash_point.h"
#include "run_binary.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Everything a complete LoRA checkpoint of tests/fixtures/models/tiny_chat holds.
void check_complete(const fs::path& dir) {
  INFO(dir.string());
  for (const char* file : {"config.json", "model.safetensors", "adapter_model.safetensors", "adapter_config.json",
                           "tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    CHECK(fs::exists(dir / file));
}

// Names beside the checkpoint that a save left: "checkpoint.tmp-PID", "checkpoint.old-PID".
std::vector<std::string> debris(const fs::path& run_dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(run_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("checkpoint.", 0) == 0) names.push_back(name);
  }
  return names;
}

}  // namespace

TEST_CASE("checkpoint: a crash before or after the swap leaves a complete checkpoint, and the next run cleans up",
          "[binary][fault][checkpoint]") {
  const fs::path root = fs::temp_directory_path() / ("areal_crash_save_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const fs::path run_dir = root / "areal-train" / "trial0", checkpoint = run_dir / "checkpoint";
  auto sft = [&](int steps, const std::string& crash_at) {
    const std::string env = crash_at.empty() ? "" : "AREAL_TEST_CRASH_AT=" + crash_at + " ";
    return run(env + train_bin() + " --job sft --model_path tests/fixtures/models/tiny_chat"
               " --train_dataset.path configs/data/arithmetic_sft.jsonl --train_dataset.batch_size 4"
               " --actor.dtype float32 --actor.use_lora true --actor.lora_rank 4 --optimizer.lr 1e-2"
               " --total_train_steps " + std::to_string(steps) + " --cluster.fileroot " + root.string());
  };

  Result first = sft(1, "");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  check_complete(checkpoint);
  const std::string first_adapters = file_bytes(checkpoint / "adapter_model.safetensors");

  // Crash with the new checkpoint complete in checkpoint.tmp-PID, before the swap: the
  // final name still holds the first run's checkpoint, unchanged.
  Result before = sft(2, "checkpoint:before_swap");
  INFO(before.output);
  CHECK(before.exit_code == areal::kCrashPointExitCode);
  check_complete(checkpoint);
  CHECK(file_bytes(checkpoint / "adapter_model.safetensors") == first_adapters);
  std::vector<std::string> left = debris(run_dir);
  REQUIRE(left.size() == 1);
  CHECK(left[0].rfind("checkpoint.tmp-", 0) == 0);
  check_complete(run_dir / left[0]);  // the new one was complete, only not swapped in

  // Crash just after the swap: the final name holds the new checkpoint, with every
  // file; this run removed the previous crash's debris and left its own (the old one).
  Result after = sft(2, "checkpoint:after_swap");
  INFO(after.output);
  CHECK(after.exit_code == areal::kCrashPointExitCode);
  check_complete(checkpoint);
  CHECK(file_bytes(checkpoint / "adapter_model.safetensors") != first_adapters);
  CHECK_THAT(after.output, Contains("removed " + (run_dir / left[0]).string()) && Contains("left by a save that crashed"));
  std::vector<std::string> left_after = debris(run_dir);
  REQUIRE(left_after.size() == 1);
  CHECK(left_after[0] != left[0]);
  CHECK(file_bytes(run_dir / left_after[0] / "adapter_model.safetensors") == first_adapters);  // the replaced one

  // A run without a crash removes the rest, saying so, and leaves nothing beside.
  Result clean = sft(1, "");
  INFO(clean.output);
  REQUIRE(clean.exit_code == 0);
  CHECK_THAT(clean.output, Contains("removed " + (run_dir / left_after[0]).string()));
  CHECK(debris(run_dir).empty());
  check_complete(checkpoint);
  fs::remove_all(root);
}
