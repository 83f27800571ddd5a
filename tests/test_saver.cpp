// Periodic Hugging Face saves through the real binary: one directory per save, named as
// AReaL names them, at the steps saver.freq_steps and saver.freq_epochs ask for, the
// newest saver.keep_last kept, each a complete checkpoint; the final one in
// <run dir>/checkpoint.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "run_binary.h"

namespace fs = std::filesystem;

TEST_CASE("saver: periodic saves go to one directory each, the newest keep_last kept", "[binary][saver]") {
  const fs::path root = fs::temp_directory_path() / ("areal_saver_" + std::to_string(::getpid()));
  fs::remove_all(root);
  // 64 rows in batches of 16: 4 steps per epoch, 3 epochs. Saves after steps 3, 4 (an
  // epoch's end), 6, 8 (an epoch's end), 9; none after 12, the last: step indices
  // 2, 3, 5, 7, 8 from 0, of which the newest 3 stay.
  Result r = run(std::string(AREAL_TRAIN_BIN) +
                 " --job sft --model_path tests/fixtures/models/tiny_chat"
                 " --train_dataset.path configs/data/arithmetic_sft.jsonl --train_dataset.batch_size 16"
                 " --actor.dtype float32 --total_train_epochs 3 --saver.freq_steps 3 --saver.freq_epochs 1"
                 " --saver.keep_last 3 --cluster.fileroot " + root.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const fs::path run_dir = root / "areal-train" / "trial0";
  std::set<std::string> saves;
  for (const auto& entry : fs::directory_iterator(run_dir / "checkpoints")) saves.insert(entry.path().filename());
  CHECK(saves == std::set<std::string>{"epoch1epochstep1globalstep5", "epoch1epochstep3globalstep7",
                                       "epoch2epochstep0globalstep8"});
  for (const auto& name : saves)
    for (const char* file : {"config.json", "model.safetensors", "tokenizer.json"}) {
      INFO(name << "/" << file);
      CHECK(fs::exists(run_dir / "checkpoints" / name / file));
    }
  for (const char* removed : {"epoch0epochstep2globalstep2", "epoch0epochstep3globalstep3"})
    CHECK_THAT(r.output, Catch::Matchers::Contains(std::string("removed ") +
                                                   (run_dir / "checkpoints" / removed).string()));
  CHECK(fs::exists(run_dir / "checkpoint" / "model.safetensors"));
  CHECK(fs::file_size(run_dir / "checkpoint" / "model.safetensors") ==
        fs::file_size(run_dir / "checkpoints" / "epoch2epochstep0globalstep8" / "model.safetensors"));
  fs::remove_all(root);
}
