// The real areal-train binary: exit codes and messages, alone and under mpirun.
#include "catch_with_torch.h"

#include <sys/wait.h>

#include <unistd.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <iterator>
#include <map>
#include <regex>

#include "areal/model/hf_weights.h"
#include "jsonl_rows.h"
#include "run_binary.h"
#include "test_paths.h"

using Catch::Matchers::Contains;

namespace {

const std::string kBin = train_bin();
const std::string kMpirun2 = mpirun_cmd() + " -np 2 " + train_bin();

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

std::string temp_file(const std::string& name, const std::string& content) {
  auto path = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  std::ofstream(path) << content;
  return path.string();
}

}  // namespace

TEST_CASE("binary: memory_efficient_load with init_from_scratch exits 2 naming both", "[binary]") {
  Result r = run(kBin + " --fsdp.memory_efficient_load true --init_from_scratch true");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("fsdp.memory_efficient_load") && Contains("init_from_scratch"));
}

TEST_CASE("binary: a misspelt option exits 2 with a suggestion", "[binary]") {
  Result r = run(kBin + " --fsdp.memory_efficent_load true");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Contains("did you mean 'fsdp.memory_efficient_load'"));
}

TEST_CASE("binary: every config in configs/ is valid", "[binary][configs]") {
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(source_path("configs"))) {
    if (entry.path().extension() != ".yaml") continue;
    // Configs for real clusters name paths that only exist there: give them a local model.
    Result r = run(kBin + " --print-config --config " + entry.path().string() +
                   " --model_path tests/fixtures/models/tiny_chat");
    INFO(entry.path() << "\n" << r.output);
    CHECK(r.exit_code == 0);
    ++checked;
  }
  CHECK(checked >= 5);
}

TEST_CASE("binary: --print-config output fed back with --config prints the same text", "[binary]") {
  Result first = run(kBin + " --print-config --config configs/demo.yaml --optimizer.lr 1e-4");
  REQUIRE(first.exit_code == 0);
  CHECK_THAT(first.stdout_only, Contains("lr: 1e-04"));
  std::string path = temp_file("printed.yaml", first.stdout_only);
  Result second = run(kBin + " --print-config --config " + path);
  CHECK(second.exit_code == 0);
  CHECK(second.stdout_only == first.stdout_only);
  std::filesystem::remove(path);
}

TEST_CASE("binary: --help and --cli-reference", "[binary]") {
  Result help = run(kBin + " --help");
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.stdout_only, Contains("--optimizer.lr") && Contains("--gconfig.n_samples"));
  Result ref = run(kBin + " --cli-reference");
  CHECK(ref.exit_code == 0);
  CHECK_THAT(ref.stdout_only, Contains("| `fsdp.memory_efficient_load` | bool | `false`"));
}

TEST_CASE("binary: bad config files exit 2 with a clear message", "[binary]") {
  Result missing = run(kBin + " --config /no/such.yaml");
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.output, Contains("/no/such.yaml") && Contains("no such file"));

  std::string bad = temp_file("bad.yaml", "seed: 1\noptimizer: [lr: 1\n");
  Result malformed = run(kBin + " --config " + bad);
  CHECK(malformed.exit_code == 2);
  CHECK_THAT(malformed.output, Contains(bad + ":") && Contains("malformed YAML"));
  std::filesystem::remove(bad);

  Result type = run(kBin + " --optimizer.lr fast --init_from_scratch true");
  CHECK(type.exit_code == 2);
  CHECK_THAT(type.output, Contains("'fast' is not a number"));

  Result path = run(kBin + " --model_path /no/model/here");
  CHECK(path.exit_code == 2);
  CHECK_THAT(path.output, Contains("'/no/model/here' does not exist"));
}

TEST_CASE("binary: runs as a single process", "[binary][mpi]") {
  Result r = run(kBin + " --init_from_scratch true");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("[r0/1]") && Contains("world_size=1") && Contains("rank 0: host"));
}

TEST_CASE("binary: under mpirun -np 2 every rank bootstraps and rank 0 reports", "[binary][mpi]") {
  Result r = run(kMpirun2 + " --init_from_scratch true");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("[r0/2]") && Contains("world_size=2"));
  CHECK_THAT(r.output, Contains("rank 0: host") && Contains("rank 1: host") && Contains("local rank 1/2"));
  CHECK(count(r.output, "world_size=2") == 1);  // rank 1 stays quiet at info level
}

TEST_CASE("binary: under mpirun -np 2 a config error is printed once and the job exits non-zero", "[binary][mpi]") {
  Result r = run(kMpirun2 + " --fsdp.memory_efficient_load true --init_from_scratch true");
  CHECK(r.exit_code != 0);
  CHECK(count(r.output, "cannot both be true") == 1);

  // A config error on rank 1 alone (mpirun gives each rank its own arguments, as a file
  // that one node lacks would): rank 1 says it, with its rank, and the job ends non-zero.
  Result alone = run(mpirun_cmd() + " -np 1 " + train_bin() + " --init_from_scratch true : -np 1 " + train_bin() +
                     " --init_from_scratch true --fsdp.memory_efficient_load true");
  CHECK(alone.exit_code != 0);
  CHECK(count(alone.output, "cannot both be true") == 1);
  CHECK_THAT(alone.output, Contains("[r1/2]"));

  Result print = run(kMpirun2 + " --print-config --init_from_scratch true");
  CHECK(print.exit_code == 0);
  CHECK(count(print.stdout_only, "memory_efficient_load:") == 1);
}

TEST_CASE("binary: the backends and allocation_mode are checked against the world size", "[binary][mpi]") {
  Result wrong = run(kMpirun2 + " --init_from_scratch true --allocation_mode fsdp:d4");
  CHECK(wrong.exit_code == 2);
  CHECK(count(wrong.output, "asks for 4 training ranks (d x t x c) but the job has 2") == 1);
  Result too_wide = run(kMpirun2 + " --init_from_scratch true --rollout.backend sglang:d1t4");
  CHECK(too_wide.exit_code == 2);
  CHECK(count(too_wide.output, "asks for 4 generation ranks") == 1);
  Result right = run(kMpirun2 + " --init_from_scratch true --allocation_mode d2");
  CHECK(right.exit_code == 0);
  Result tensor_parallel = run(kMpirun2 + " --init_from_scratch true --rollout.backend sglang:d1t2 --actor.backend fsdp:d2");
  CHECK(tensor_parallel.exit_code == 0);
  CHECK_THAT(tensor_parallel.output, Contains("generation: 1 replica x 2 tensor-parallel ranks (the built-in engine "
                                              "in the shape of sglang); training: FSDP over 2 ranks; colocated"));
}

TEST_CASE("binary: log.all_ranks lets every rank log info lines, log.level filters", "[binary][mpi]") {
  Result quiet = run(kMpirun2 + " --init_from_scratch true");
  CHECK(quiet.exit_code == 0);
  CHECK(count(quiet.output, "[r1/2]") == 0);
  Result all = run(kMpirun2 + " --init_from_scratch true --log.all_ranks true");
  CHECK(all.exit_code == 0);
  CHECK(count(all.output, "[r1/2]") > 0);
  Result warn_only = run(kBin + " --init_from_scratch true --log.level warn");
  CHECK(warn_only.exit_code == 0);
  CHECK(count(warn_only.output, " info ") == 0);
  Result bad = run(kBin + " --init_from_scratch true --log.level loud");
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.output, Contains("'loud' is not allowed"));
}

TEST_CASE("binary: a rank that throws during a collective ends the job quickly, naming its error",
          "[binary][mpi][fault]") {
  Result r = run("timeout 60 " + mpirun_cmd() + " -np 3 " + fault_bin() + " throw");
  CHECK(r.exit_code != 0);
  CHECK(r.exit_code != 124);  // not ended by the timeout
  CHECK(r.seconds < 30);
  CHECK_THAT(r.output, Contains("[r1/3]") && Contains("fatal: injected failure on rank 1"));
  CHECK(count(r.output, "injected failure on rank 1") == 1);
}

TEST_CASE("binary: a rank killed by SIGKILL ends the job under mpirun", "[binary][mpi][fault]") {
  Result r = run("timeout 60 " + mpirun_cmd() + " -np 3 " + fault_bin() + " kill");
  CHECK(r.exit_code != 0);
  CHECK(r.exit_code != 124);
  CHECK(r.seconds < 30);
  CHECK_THAT(r.output, Contains("signal 9"));  // mpirun names the dead rank and its signal
}

TEST_CASE("binary: a stopped rank ends the job after cluster.collective_timeout, named by its silence",
          "[binary][mpi][fault]") {
  // Rank 1 of 3 stops itself (SIGSTOP) at the start of SFT step 2; ranks 0 and 2 wait in
  // the step's first collective, and each ends the job after 3 s saying what it waited in.
  const std::string root = (std::filesystem::temp_directory_path() / ("areal_stop_" + std::to_string(::getpid()))).string();
  Result r = run("AREAL_TEST_STOP_AT=sft:step2 AREAL_TEST_STOP_RANK=1 timeout 60 " + mpirun_cmd() +
                 " -np 3 " + kBin + " --job sft --init_from_scratch true --train_dataset.path "
                 "configs/data/arithmetic_sft.jsonl --train_dataset.batch_size 6 --total_train_steps 5 "
                 "--cluster.collective_timeout 3 --cluster.fileroot " + root);
  INFO(r.output);
  CHECK(r.exit_code != 0);
  CHECK(r.exit_code != 124);  // not the outer timeout: the job ended by itself
  CHECK(r.seconds < 40);
  CHECK_THAT(r.output, Contains("step 1/5") && !Contains("step 2/5"));
  for (const char* waiting : {"[r0/3]", "[r2/3]"}) {
    INFO(waiting);
    CHECK_THAT(r.output, Contains(std::string(waiting) + " ") && Contains("during sft step 2) has not completed after"));
  }
  CHECK(count(r.output, "has not completed after") >= 1);
  CHECK(count(r.output, "[r1/3] ") == 0);  // the stopped rank says nothing
  // Waiting did not spin a core: each waiting rank's thread used well under the 3 s it
  // waited (it polls at full speed for 0.1 s only, then naps; spinning would be ~3 s).
  const std::regex used(R"(after (\d+) s \(cluster\.collective_timeout = 3; it used ([0-9.]+) s of CPU meanwhile\))");
  int reports = 0;
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), used), end; it != end; ++it, ++reports) {
    INFO((*it)[0].str());
    CHECK(std::stod((*it)[1].str()) >= 3);
    CHECK(std::stod((*it)[2].str()) < 0.5);
  }
  CHECK(reports >= 1);
  std::filesystem::remove_all(root);
}

TEST_CASE("binary: device work that never completes (a stuck NCCL collective) ends the process after the timeout",
          "[binary][fault]") {
  Result stuck = run("timeout 30 " + fault_bin() + " queued");
  INFO(stuck.output);
  CHECK(stuck.exit_code == 1);
  CHECK(stuck.seconds < 4);
  CHECK_THAT(stuck.output, Contains("collective all_gather (4.00 KiB") && Contains("queued on the GPU") &&
                               Contains("abort hook ran") && !Contains("still running"));
  Result done = run("timeout 30 " + fault_bin() + " queued-done");
  INFO(done.output);
  CHECK(done.exit_code == 0);
  CHECK_THAT(done.output, Contains("still running after 4 s") && !Contains("has not completed"));
}

TEST_CASE("binary: out of memory is one line saying what to lower, without the torch backtrace", "[binary][fault]") {
  // 16 rows of 6,000 tokens need about 5 GiB in one step; the address space is capped
  // at 4.3 GiB (the process starts in about 3), so the first big allocation fails.
  std::string rows;
  for (int i = 0; i < 16; ++i) rows += "{\"text\": \"" + std::string(6000, '1') + "\"}\n";
  const std::string data = temp_file("sft_long_rows.jsonl", rows);
  const std::string root = (std::filesystem::temp_directory_path() / ("areal_oom_" + std::to_string(::getpid()))).string();
  Result r = run("ulimit -v 4500000 && timeout 60 " + kBin + " --job sft --init_from_scratch true --train_dataset.path " +
                 data + " --train_dataset.batch_size 16 --actor.dtype float32 --total_train_steps 1 --cluster.fileroot " +
                 root);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(count(r.output, "fatal: out of memory: ") == 1);
  CHECK_THAT(r.output, Contains("you tried to allocate") && Contains("actor.mb_spec.max_tokens_per_mb"));
  CHECK_THAT(r.output, !Contains("frame #"));  // torch's C++ backtrace
  std::filesystem::remove(data);
  std::filesystem::remove_all(root);
}

TEST_CASE("binary: --job init under mpirun -np 2 loads a checkpoint and prints the stage table", "[binary][mpi][init]") {
  Result r = run(kMpirun2 + " --job init --model_path tests/fixtures/models/qwen2_untied --fsdp.memory_efficient_load true");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("staged init of checkpoint tests/fixtures/models/qwen2_untied (memory-efficient") &&
                           Contains("rank0_load") && Contains("broadcast") && Contains("verify") &&
                           Contains("peak +mem r1") && Contains("loading checkpoint: 100.0%"));
  // The default (sliced reads): every rank reads its own slices, nothing is broadcast.
  Result sliced = run(kMpirun2 + " --job init --model_path tests/fixtures/models/qwen2_untied");
  CHECK(sliced.exit_code == 0);
  CHECK_THAT(sliced.output, Contains("(sliced: every rank read its own slices)") && Contains("sliced_read") &&
                                Contains("reading this rank's slices of the checkpoint: 100.0%") &&
                                !Contains("broadcast"));
  Result rl = run(kBin + " --job rl --init_from_scratch true");
  CHECK(rl.exit_code == 2);
  CHECK_THAT(rl.output, Contains("'train_dataset.path' is required for job=rl"));
  Result sft = run(kBin + " --job sft --init_from_scratch true");
  CHECK(sft.exit_code == 2);
  CHECK_THAT(sft.output, Contains("'train_dataset.path' is required for job=sft"));
}

TEST_CASE("binary: a checkpoint that disagrees with its config ends the whole job naming the tensor",
          "[binary][mpi][init][fault]") {
  namespace fs = std::filesystem;
  fs::path bad = fs::temp_directory_path() / ("areal_bad_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(bad);
  fs::copy(source_path("tests/fixtures/models/llama"), bad);
  std::string config;
  {
    std::ifstream in(bad / "config.json");
    config.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  config.replace(config.find("\"intermediate_size\": 48"), 23, "\"intermediate_size\": 40");
  std::ofstream(bad / "config.json") << config;
  for (const char* memory_efficient : {"true", "false"}) {
    INFO("memory_efficient_load " << memory_efficient);
    Result r = run("timeout 60 " + kMpirun2 + " --model_path " + bad.string() + " --fsdp.memory_efficient_load " +
                   memory_efficient);
    CHECK(r.exit_code == 2);  // bad input, refused alike on every rank
    CHECK(r.seconds < 30);
    CHECK(count(r.output, "config.json implies [40, 32]") >= 1);
    CHECK_THAT(r.output, Contains("model.layers.0.mlp.gate_proj.weight"));
  }
  fs::remove_all(bad);
}

// Also with context parallelism (actor.backend fsdp:d1c2 and fsdp:d2c2: every sequence
// split over 2 ranks, attention by all-to-all of heads; d1c2 also with packed
// micro-batches, the packed row split) and tensor parallelism (fsdp:d1t2, fsdp:d2t2: each
// layer's heads, channels and vocabulary split over 2 ranks; fsdp:d1t2c2 with packed
// micro-batches): the same run.
TEST_CASE("binary: --job sft gives the same losses and weights under mpirun -np 1 and -np 2", "[binary][mpi][sft]") {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("areal_sft_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const std::string args = " --job sft --init_from_scratch true --train_dataset.path configs/data/arithmetic_sft.jsonl"
                           " --train_dataset.batch_size 8 --total_train_steps 6 --actor.dtype float32"
                           " --optimizer.lr 1e-3 --cluster.fileroot ";
  std::vector<std::vector<double>> losses;
  const std::vector<std::pair<std::string, std::string>> shapes = {
      {"1", ""}, {"2", ""}, {"2", "fsdp:d1c2"}, {"4", "fsdp:d2c2"}, {"2", "fsdp:d1c2 --actor.mb_spec.max_tokens_per_mb 40"},
      {"2", "fsdp:d1t2"}, {"4", "fsdp:d2t2"}, {"4", "fsdp:d1t2c2 --actor.mb_spec.max_tokens_per_mb 40"}};
  for (const auto& [np, backend] : shapes) {
    const std::string dir = np + backend.substr(std::min<size_t>(backend.size(), 5), 4) +
                            (backend.find("max_tokens") != std::string::npos ? "packed" : "");
    Result r = run(mpirun_cmd() + " -np " + np + " " + kBin + (backend.empty() ? "" : " --actor.backend " + backend) +
                   args + (root / dir).string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Contains("step 6/6") && Contains("tokens/s") && Contains("saved"));
    if (backend.find("c2") != std::string::npos) CHECK_THAT(r.output, Contains("every sequence over 2 ranks"));
    if (backend.find("t2") != std::string::npos) CHECK_THAT(r.output, Contains("data-parallel group"));
    std::ifstream stats(root / dir / "areal-train" / "trial0" / "stats.jsonl");
    std::vector<double> run_losses;
    for (std::string line; std::getline(stats, line);) run_losses.push_back(nlohmann::json::parse(line)["loss"]);
    REQUIRE(run_losses.size() == 6);
    losses.push_back(run_losses);
  }
  for (size_t run = 1; run < losses.size(); ++run)
    for (size_t i = 0; i < 6; ++i) CHECK(std::abs(losses[0][i] - losses[run][i]) < 1e-4);  // world size is a detail
  CHECK(losses[0].back() < losses[0].front() - 0.5);  // it learns

  auto one = areal::load_causal_lm((root / "1/areal-train/trial0/checkpoint").string(), at::kFloat);
  for (const char* other : {"2", "2d1c2", "4d2c2", "2d1c2packed", "2d1t2", "4d2t2", "4d1t2packed"}) {
    auto two = areal::load_causal_lm((root / other / "areal-train/trial0/checkpoint").string(), at::kFloat);
    auto p1 = one->named_parameters(), p2 = two->named_parameters();
    // Tensor parallelism sums the softmax and the projections in another float32 order; six
    // AdamW steps (each a gradient over its own running scale) leave up to 2e-5 on a weight.
    const double atol = std::string(other).find("t2") != std::string::npos ? 5e-5 : 1e-5;
    for (size_t i = 0; i < p1.size(); ++i) {
      INFO(other << ": " << p1[i].key());
      CHECK(at::allclose(p1[i].value(), p2[i].value(), 1e-4, atol));
    }
  }
  fs::remove_all(root);
}

TEST_CASE("binary: --job sft runs the engine at fsdp.prefetch_depth", "[binary][mpi][sft]") {
  // Issue 26, defect 1: Policy built its engine without the option, so every job ran at
  // depth 1 and 0 could not turn prefetching off. stats.jsonl counts the gathers a unit
  // found already started: none at depth 0, some at depth 1 and 2, the same losses.
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("areal_prefetch_" + std::to_string(::getpid()));
  fs::remove_all(root);
  std::map<int, std::vector<double>> losses, prefetched;
  for (int depth : {0, 1, 2}) {
    Result r = run(kMpirun2 + " --job sft --init_from_scratch true --train_dataset.path configs/data/arithmetic_sft.jsonl"
                              " --train_dataset.batch_size 8 --total_train_steps 2 --actor.dtype float32"
                              " --fsdp.prefetch_depth " + std::to_string(depth) +
                   " --cluster.fileroot " + (root / std::to_string(depth)).string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    for (const nlohmann::json& row : read_jsonl(root / std::to_string(depth) / "areal-train" / "trial0" / "stats.jsonl")) {
      losses[depth].push_back(row["loss"].get<double>());
      prefetched[depth].push_back(row["prefetched_gathers"].get<double>());
    }
    REQUIRE(losses[depth].size() == 2);
  }
  CHECK(prefetched[0] == std::vector<double>{0, 0});
  for (int depth : {1, 2}) {
    INFO("depth " << depth);
    CHECK(prefetched[depth][0] > 0);
    CHECK(prefetched[depth][1] > 0);
    CHECK(losses[depth] == losses[0]);  // the bytes moved earlier, not different ones
  }
  CHECK(prefetched[2][0] >= prefetched[1][0]);
  fs::remove_all(root);
}

TEST_CASE("binary: --job sft evaluates valid_dataset: on the training batch it equals the next step's loss",
          "[binary][mpi][sft]") {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("areal_sft_eval_" + std::to_string(::getpid()));
  fs::remove_all(root);
  // One batch is the whole file, so every step trains on exactly what is evaluated: the
  // evaluation after step k (same weights, no update, other batches and packing) must
  // give the loss step k + 1 computes before its update.
  Result r = run(mpirun_cmd() + " -np 2 " + kBin +
                 " --job sft --init_from_scratch true --train_dataset.path configs/data/arithmetic_sft.jsonl"
                 " --train_dataset.batch_size 64 --total_train_epochs 3 --actor.dtype float32 --optimizer.lr 1e-3"
                 " --valid_dataset.path configs/data/arithmetic_sft.jsonl --valid_dataset.batch_size 10"
                 " --evaluator.freq_steps 1 --cluster.fileroot " + root.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("eval (before training): loss") && Contains("held-out loss"));
  std::vector<double> train, eval;
  std::vector<int64_t> eval_steps;
  for (const auto& row : read_jsonl(root / "areal-train" / "trial0" / "stats.jsonl")) {
    if (row.contains("eval_loss")) {
      eval.push_back(row["eval_loss"].get<double>());
      eval_steps.push_back(row["step"].get<int64_t>());
    } else {
      train.push_back(row["loss"].get<double>());
    }
  }
  REQUIRE(train.size() == 3);
  REQUIRE(eval.size() == 4);  // before, after steps 1 and 2, after the last
  CHECK(eval_steps == std::vector<int64_t>{0, 1, 2, 3});
  for (size_t k = 0; k < 3; ++k) CHECK(eval[k] == Approx(train[k]).epsilon(1e-4));
  CHECK(eval[3] < eval[0]);  // it learns
  fs::remove_all(root);
}

TEST_CASE("binary: --job sft with drop_last false keeps the partial last batch inside its epoch", "[binary][mpi][sft]") {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("areal_sft_last_" + std::to_string(::getpid()));
  fs::remove_all(root);
  std::string rows;
  for (int i = 0; i < 8; ++i) rows += "{\"text\": \"" + std::to_string(i) + "+1=" + std::to_string(i + 1) + "\"}\n";
  const std::string data = temp_file("sft_eight_rows.jsonl", rows);
  auto run_sft = [&](int batch_size) {
    Result r = run("timeout 120 " + kMpirun2 + " --job sft --init_from_scratch true --actor.dtype float32 "
                   "--train_dataset.drop_last false --total_train_epochs 1 --train_dataset.path " + data +
                   " --train_dataset.batch_size " + std::to_string(batch_size) + " --cluster.fileroot " + root.string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    std::vector<nlohmann::json> steps;
    std::ifstream stats(root / "areal-train" / "trial0" / "stats.jsonl");
    for (std::string line; std::getline(stats, line);) steps.push_back(nlohmann::json::parse(line));
    return steps;
  };
  std::vector<nlohmann::json> six = run_sft(6);
  REQUIRE(six.size() == 2);
  CHECK(six[0]["rows"] == 6);
  CHECK(six[1]["rows"] == 2);
  CHECK(six[1]["epoch"] == 0);
  std::vector<nlohmann::json> ten = run_sft(10);
  REQUIRE(ten.size() == 1);
  CHECK(ten[0]["rows"] == 8);
  fs::remove_all(root);
  fs::remove(data);
}
