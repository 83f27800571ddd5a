// Resuming a run through the real binary under mpirun -np 2: a run killed at a step
// (as by kill -9: AREAL_TEST_CRASH_AT, util/crash_point.h) or stopped by SIGTERM and
// started again with the same command ends with the same stats, row for row, and the
// same final weights, byte for byte, as a run never interrupted (float32). A run saved
// at 2 ranks continues at 1 and at 4.
#include "catch_with_torch.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "areal/util/crash_point.h"
#include "areal/util/error.h"
#include "jsonl_rows.h"
#include "run_binary.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kMpirun = mpirun_cmd();

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("areal_recover_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

int64_t recovered_step(const fs::path& run_dir) {
  std::ifstream in(run_dir / "recover" / "recover_info.json");
  return json::parse(in).at("steps_done").get<int64_t>();
}

// The rows of two stats.jsonl files agree on every figure but wall time and memory.
void check_same_stats(const std::vector<json>& got, const std::vector<json>& want,
                      const std::vector<std::string>& ignored) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("row " << i << "\ngot:  " << got[i].dump() << "\nwant: " << want[i].dump());
    json a = got[i], b = want[i];
    for (const auto& key : ignored) {
      a.erase(key);
      b.erase(key);
    }
    CHECK(a == b);
  }
}

// A 2-rank SFT run of 6 steps on the tiny chat model (float32, a cosine schedule with
// warm-up, so the learning rate depends on the step), in root/name.
struct SftRuns {
  fs::path root = fresh_dir("sft");
  std::vector<json> want;   // the uninterrupted run's stats.jsonl
  std::string want_weights;  // and its final model.safetensors

  SftRuns() {
    Result whole = sft(2, "whole", "");
    INFO(whole.output);
    REQUIRE(whole.exit_code == 0);
    want = read_jsonl(run_dir("whole") / "stats.jsonl");
    REQUIRE(want.size() == 6);
    want_weights = file_bytes(run_dir("whole") / "checkpoint" / "model.safetensors");
  }
  ~SftRuns() { fs::remove_all(root); }

  Result sft(int ranks, const std::string& name, const std::string& env, const std::string& extra = "") const {
    return run(env + " " + kMpirun + " -np " + std::to_string(ranks) + " " + train_bin() +
               " --job sft --model_path tests/fixtures/models/tiny_chat"
               " --train_dataset.path configs/data/arithmetic_sft.jsonl --train_dataset.batch_size 4"
               " --actor.dtype float32 --optimizer.lr 1e-3 --optimizer.lr_scheduler_type cosine"
               " --optimizer.warmup_steps_proportion 0.2 --total_train_steps 6"
               " --recover.mode auto --recover.freq_steps 2 --cluster.fileroot " + (root / name).string() + extra);
  }
  fs::path run_dir(const std::string& name) const { return root / name / "areal-train" / "trial0"; }

  // The resumed run's stats and weights are the uninterrupted run's.
  void check_same_as_whole(const std::string& name) const {
    check_same_stats(read_jsonl(run_dir(name) / "stats.jsonl"), want, {"seconds", "peak_rss_bytes"});
    CHECK(file_bytes(run_dir(name) / "checkpoint" / "model.safetensors") == want_weights);
  }
};

}  // namespace

TEST_CASE("recover: SFT killed at a step and started again ends bit-identical", "[binary][mpi][recover]") {
  SftRuns runs;
  // Killed at the start of step 6: the recover checkpoint is step 4's; step 5 is logged
  // and is done again.
  Result killed = runs.sft(2, "killed", "AREAL_TEST_CRASH_AT=sft:step6");
  INFO(killed.output);
  CHECK(killed.exit_code != 0);
  REQUIRE(recovered_step(runs.run_dir("killed")) == 4);
  CHECK(read_jsonl(runs.run_dir("killed") / "stats.jsonl").size() == 5);

  Result resumed = runs.sft(2, "killed", "");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Contains("recover: resuming after step 4"));
  runs.check_same_as_whole("killed");
}

TEST_CASE("recover: SIGTERM or SIGUSR1 on one rank stops every rank after the step with a recover checkpoint, exit 75",
          "[binary][mpi][recover]") {
  SftRuns runs;
  Result stopped = runs.sft(2, "stopped", "AREAL_TEST_SIGNAL_AT=sft:step3 AREAL_TEST_SIGNAL_RANK=1");
  INFO(stopped.output);
  CHECK(stopped.exit_code == areal::kExitStopped);
  CHECK_THAT(stopped.output, Contains("stopped by SIGTERM after step 3"));
  REQUIRE(recovered_step(runs.run_dir("stopped")) == 3);

  Result resumed = runs.sft(2, "stopped", "");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Contains("recover: resuming after step 3"));
  runs.check_same_as_whole("stopped");

  // Slurm's warning before the time limit (--signal=USR1@...), on rank 0 this time.
  Result warned = runs.sft(2, "warned", "AREAL_TEST_SIGNAL=USR1 AREAL_TEST_SIGNAL_AT=sft:step2 AREAL_TEST_SIGNAL_RANK=0");
  INFO(warned.output);
  CHECK(warned.exit_code == areal::kExitStopped);
  CHECK_THAT(warned.output, Contains("stopped by SIGUSR1 after step 2"));
  CHECK(recovered_step(runs.run_dir("warned")) == 2);
}

TEST_CASE("recover: no_save_optim leaves the moments out, and resuming it needs no_load_optim", "[binary][mpi][recover]") {
  SftRuns runs;
  Result killed = runs.sft(2, "light", "AREAL_TEST_CRASH_AT=sft:step6", " --recover.no_save_optim true");
  INFO(killed.output);
  REQUIRE(recovered_step(runs.run_dir("light")) == 4);
  // Weights only: a third of the bytes of the uninterrupted run's recover files.
  const std::string file = "recover/rank-00000-of-00002.safetensors";
  const auto light = fs::file_size(runs.run_dir("light") / file), full = fs::file_size(runs.run_dir("whole") / file);
  CHECK(std::abs(3.0 * static_cast<double>(light) - static_cast<double>(full)) < 3 * 8192.0);

  Result refused = runs.sft(2, "light", "");
  INFO(refused.output);
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.output, Contains("recover.no_load_optim") && !Contains("staged init"));

  Result resumed = runs.sft(2, "light", "", " --recover.no_load_optim true");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Contains("AdamW moments start from zero"));
  const std::vector<json> got = read_jsonl(runs.run_dir("light") / "stats.jsonl");
  REQUIRE(got.size() == 6);
  // Step 5's loss and gradient come from the weights after step 4, which are exact; its
  // update, with fresh moments, is not the uninterrupted run's, so step 6 differs.
  CHECK(got[4]["loss"] == runs.want[4]["loss"]);
  CHECK(got[4]["grad_norm"] == runs.want[4]["grad_norm"]);
  CHECK(got[5]["loss"] != runs.want[5]["loss"]);
}

// Also on another mesh: at 4 ranks as fsdp:d2c2 and at 2 as fsdp:d1c2 (every sequence
// over 2 ranks, context parallelism), at 4 as fsdp:d2t2 (each layer over 2 ranks, tensor
// parallelism).
TEST_CASE("recover: a run saved at 2 ranks continues at 1 and at 4 ranks", "[binary][mpi][recover]") {
  SftRuns runs;
  Result killed = runs.sft(2, "resized", "AREAL_TEST_CRASH_AT=sft:step5");
  INFO(killed.output);
  REQUIRE(recovered_step(runs.run_dir("resized")) == 4);
  for (const auto& [ranks, backend] : std::vector<std::pair<int, std::string>>{
           {1, ""}, {4, ""}, {4, "fsdp:d2c2"}, {2, "fsdp:d1c2"}, {4, "fsdp:d2t2"}}) {
    INFO(ranks << " ranks " << backend);
    const std::string name = "resized" + std::to_string(ranks) + backend.substr(std::min<size_t>(backend.size(), 5));
    fs::create_directories(runs.run_dir(name));
    fs::copy(runs.run_dir("resized") / "recover", runs.run_dir(name) / "recover");
    fs::copy(runs.run_dir("resized") / "stats.jsonl", runs.run_dir(name) / "stats.jsonl");
    Result resumed = runs.sft(ranks, name, "", backend.empty() ? "" : " --actor.backend " + backend);
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    CHECK_THAT(resumed.output, Contains("recover: resuming after step 4"));
    if (ranks != 2) CHECK_THAT(resumed.output, Contains("re-sharded"));
    // The same steps, up to the order of floating-point sums, which the world size changes
    // (tests/mpi/test_recover.cpp checks that the loaded weights and moments are exact).
    std::vector<json> got = read_jsonl(runs.run_dir(name) / "stats.jsonl");
    REQUIRE(got.size() == runs.want.size());
    for (size_t i = 4; i < got.size(); ++i) {
      INFO("step " << i + 1);
      CHECK(got[i]["loss"].get<double>() == Approx(runs.want[i]["loss"].get<double>()).epsilon(1e-4));
      CHECK(got[i]["lr"].get<double>() == runs.want[i]["lr"].get<double>());
    }
  }
}

namespace {

// Kills a 2-rank RL run (ci_smoke.yaml, 4 steps, `extra` options) at the start of step 4,
// after the recover checkpoint of step 2, starts it again, and compares it with a run
// never interrupted.
void check_rl_resume(const std::string& label, const std::string& extra) {
  const fs::path root = fresh_dir(label);
  auto rl = [&](const std::string& name, const std::string& env) {
    return run(env + " " + kMpirun + " -np 2 " + train_bin() +
               " --config configs/ci_smoke.yaml total_train_epochs=2 total_train_steps=4 recover.mode=auto"
               " recover.freq_steps=2 evaluator.freq_steps=3 stats_logger.tensorboard.path="
               // A random model earns no reward: a constant advantage of 1 (REINFORCE
               // without a baseline) still moves the policy, away from the KL reference.
               " actor.reward_bias=1 actor.adv_norm.mean_level=none actor.adv_norm.std_level=none " +
               extra + " cluster.fileroot=" + (root / name).string());
  };
  auto run_dir = [&](const std::string& name) { return root / name / "ci-smoke" / "trial0"; };

  Result whole = rl("whole", "");
  INFO(whole.output);
  REQUIRE(whole.exit_code == 0);
  Result killed = rl("killed", "AREAL_TEST_CRASH_AT=rl:step4");
  INFO(killed.output);
  CHECK(killed.exit_code != 0);
  REQUIRE(recovered_step(run_dir("killed")) == 2);
  Result resumed = rl("killed", "");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Contains("recover: resuming after step 2"));
  CHECK_THAT(resumed.output, !Contains("eval (before training)"));  // its figure comes back from the checkpoint

  const std::vector<json> want = read_jsonl(run_dir("whole") / "stats.jsonl");
  REQUIRE(want.size() == 6);  // eval before, 4 steps, eval after
  CHECK(want[4]["grad_norm"].get<double>() > 0);  // the steps after the resume do learn
  CHECK(std::abs(want[4]["kl"].get<double>()) > 0);
  CHECK(want[3].contains("eval_accuracy"));
  check_same_stats(read_jsonl(run_dir("killed") / "stats.jsonl"), want,
                   {"rollout_seconds", "train_seconds", "step_seconds", "gen_tokens_per_second", "train_tokens_per_second",
                    "peak_memory_bytes"});
  for (const char* file : {"model.safetensors", "adapter_model.safetensors"}) {
    INFO(file);
    CHECK(fs::exists(run_dir("whole") / "checkpoint" / file) == (std::string(file) == "model.safetensors" ||
                                                                 extra.find("use_lora") != std::string::npos));
    CHECK(file_bytes(run_dir("killed") / "checkpoint" / file) == file_bytes(run_dir("whole") / "checkpoint" / file));
  }
  fs::remove_all(root);
}

}  // namespace

TEST_CASE("recover: an RL run killed at a step resumes bit-identical (frozen KL reference copy, evaluation)",
          "[binary][mpi][recover][rl]") {
  check_rl_resume("rl", "optimizer.lr=1e-3");
}

TEST_CASE("recover: an RL run with LoRA killed at a step resumes bit-identical (the adapters are what is saved)",
          "[binary][mpi][recover][rl]") {
  check_rl_resume("rl_lora", "actor.use_lora=true actor.lora_rank=4 optimizer.lr=1e-2");
}

TEST_CASE("recover: scripts/areal-run.sh starts a failed run again recover.retries times, each resuming",
          "[binary][mpi][recover]") {
  const fs::path root = fresh_dir("retries");
  // Every start dies at step 6, after the recover checkpoint of step 4.
  Result r = run("AREAL_TEST_CRASH_AT=sft:step6 scripts/areal-run.sh " + kMpirun + " -np 2 --"
                 " --job sft --model_path tests/fixtures/models/tiny_chat"
                 " --train_dataset.path configs/data/arithmetic_sft.jsonl --train_dataset.batch_size 4"
                 " --actor.dtype float32 --total_train_steps 6 --recover.mode auto --recover.freq_steps 2"
                 " --recover.retries 2 --cluster.fileroot " + root.string());
  INFO(r.output);
  CHECK(r.exit_code == areal::kCrashPointExitCode);
  CHECK_THAT(r.output, Contains("start 2 of 3 resumes") && Contains("start 3 of 3 resumes") &&
                           Contains("no retries left (recover.retries = 2)"));
  size_t resumes = 0;
  for (size_t at = r.output.find("recover: resuming after step 4"); at != std::string::npos;
       at = r.output.find("recover: resuming after step 4", at + 1))
    ++resumes;
  CHECK(resumes == 2);
  fs::remove_all(root);
}
