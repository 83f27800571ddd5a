// The RL job end to end through the real binary under mpirun: the CI smoke config,
// TensorBoard files read by TensorBoard itself, the same first step for N = 1 and
// N = 2, and bad input.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>

#include "areal/io/checkpoint.h"
#include "jsonl_rows.h"
#include "run_binary.h"
#include "run_python.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

const std::string kBin = train_bin();
const std::string kMpirun = mpirun_cmd();

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("areal_rl_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("rl job: configs/ci_smoke.yaml runs the whole pipeline under mpirun -np 2", "[rl][binary][mpi]") {
  const fs::path root = fresh_dir("smoke");
  Result r = run(kMpirun + " -np 2 " + kBin + " --config configs/ci_smoke.yaml cluster.fileroot=" + root.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.seconds < 60);
  CHECK_THAT(r.output, Contains("memory-efficient") && Contains("step 1/2") && Contains("step 2/2") &&
                           Contains("eval (after training)"));
  const fs::path run_dir = root / "ci-smoke" / "trial0";
  // stats.jsonl: the evaluation before, two steps, the evaluation after.
  std::vector<json> rows = read_jsonl(run_dir / "stats.jsonl");
  REQUIRE(rows.size() == 4);
  for (const char* key : {"reward_mean", "accuracy", "response_length_mean", "truncated_share", "loss", "clip_fraction",
                          "kl", "entropy", "grad_norm", "lr", "rollout_seconds", "train_seconds",
                          "gen_tokens_per_second", "peak_memory_bytes", "rollout_weight_bytes", "rollout_cache_bytes"})
    CHECK(rows[1].contains(key));
  CHECK(rows[1]["step"] == 1);
  CHECK(rows[2]["step"] == 2);
  CHECK(rows[1]["lr"].get<double>() == Approx(1e-4));
  CHECK(rows[1]["response_length_mean"].get<double>() > 0);
  // TensorBoard reads the event file as its own.
  PythonResult tb = run_python("read_tensorboard.py " + (run_dir / "tensorboard").string());
  REQUIRE(tb.exit_code == 0);
  json scalars = json::parse(tb.output);
  REQUIRE(scalars.contains("reward_mean"));
  CHECK(scalars["reward_mean"].size() == 2);
  CHECK(scalars["lr"][1][0] == 2);
  CHECK(scalars["lr"][1][1].get<double>() == Approx(1e-4));
  CHECK(scalars["entropy"][0][1].get<double>() == Approx(rows[1]["entropy"].get<double>()).epsilon(1e-5));
  // A complete Hugging Face checkpoint: weights, config and the tokenizer.
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    CHECK(fs::exists(run_dir / "checkpoint" / file));
}

TEST_CASE("rl job: GRPO on a Qwen3-MoE under mpirun -np 2 (tensor-parallel generation from the shards)",
          "[rl][binary][mpi][moe]") {
  const fs::path root = fresh_dir("moe");
  const std::string model = source_path("tests/fixtures/models/tiny_moe_chat");
  auto grpo = [&](const fs::path& fileroot, const std::string& coef, const std::string& replay,
                  const std::string& training = "fsdp:d2", const std::string& generation = "sglang:d1t2") {
    return run(kMpirun + " -np 2 " + kBin + " --config configs/ci_smoke.yaml cluster.fileroot=" + fileroot.string() +
               " model_path=" + model + " rollout.backend=" + generation + " actor.backend=" + training +
               " actor.router_aux_loss_coef=" + coef + " actor.router_replay=" + replay + " reward_fn=command:sh\\ " +
               source_path("tests/fixtures/rewards/length_parity.sh"));
  };
  Result r = grpo(root, "0.01", "true");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("(qwen3_moe, ") && Contains("parameters, 4 experts, top 2)") && Contains("step 2/2"));
  const fs::path run_dir = root / "ci-smoke" / "trial0";
  std::vector<json> rows = read_jsonl(run_dir / "stats.jsonl");
  REQUIRE(rows.size() == 4);
  CHECK(std::isfinite(rows[2]["loss"].get<double>()));
  CHECK(rows[2]["grad_norm"].get<double>() > 0);
  // The routers' figures: the load-balancing loss (2, the top-k, at perfect balance; at most
  // experts x k), the tokens of the least and most used expert of each sparse layer.
  const double aux = rows[2]["moe_aux_loss"].get<double>();
  CHECK((aux > 0 && aux <= 8.0));
  for (const char* layer : {"layer_0", "layer_1"}) {
    INFO(layer);
    const double least = rows[2][std::string("moe_tokens_min/") + layer].get<double>();
    CHECK((least >= 0 && least <= rows[2][std::string("moe_tokens_max/") + layer].get<double>()));
  }
  // The rollout's experts reached the update (routing replay): every recorded token went
  // to them, and float32 on the same weights would have routed nearly every one alike.
  for (int step : {1, 2}) {
    INFO("step " << step);
    REQUIRE(rows[step].contains("moe_route_agreement"));
    CHECK(rows[step]["moe_route_agreement"].get<double>() == 1.0);
    const double agreement = rows[step]["moe_router_agreement"].get<double>();
    CHECK((agreement > 0.9 && agreement <= 1.0));
  }
  // The saved checkpoint has the Hub's per-expert tensors, trained (not the initial ones).
  areal::io::CheckpointReader saved((run_dir / "checkpoint").string()), initial(model);
  const std::string expert = "model.layers.1.mlp.experts.2.up_proj.weight";
  REQUIRE(saved.contains(expert));
  CHECK_FALSE(at::equal(saved.read(expert), initial.read(expert)));
  CHECK(saved.names() == initial.names());
  // The option reaches the update: without the loss (0) the first step's answers are the
  // same (generated before any update), its gradient is not.
  Result off = grpo(root / "off", "0", "false");
  REQUIRE(off.exit_code == 0);
  const json step_off = read_jsonl(root / "off" / "ci-smoke" / "trial0" / "stats.jsonl")[1];
  // Measured without the replay too: then the experts trained are the router's own.
  CHECK(step_off["moe_route_agreement"].get<double>() == step_off["moe_router_agreement"].get<double>());
  REQUIRE(rows[1]["step"] == 1);
  CHECK(step_off["reward_mean"].get<double>() == rows[1]["reward_mean"].get<double>());
  CHECK(step_off["response_length_mean"].get<double>() == rows[1]["response_length_mean"].get<double>());
  CHECK(std::abs(step_off["grad_norm"].get<double>() - rows[1]["grad_norm"].get<double>()) >
        1e-6 * rows[1]["grad_norm"].get<double>());
  // Expert parallelism (e = 2: in training each rank runs 2 of the 4 experts for both
  // ranks' tokens; in generation each holds 2 experts whole): the same answers, then the
  // same first update as e = 1, and a checkpoint in the Hub layout.
  Result ep = grpo(root / "ep", "0.01", "true", "fsdp:d2e2", "sglang:d1t2e2");
  INFO(ep.output);
  REQUIRE(ep.exit_code == 0);
  CHECK_THAT(ep.output, Contains("experts over groups of 2 ranks"));
  const fs::path ep_dir = root / "ep" / "ci-smoke" / "trial0";
  const json step_ep = read_jsonl(ep_dir / "stats.jsonl")[1];
  CHECK(step_ep["reward_mean"].get<double>() == rows[1]["reward_mean"].get<double>());
  CHECK(step_ep["response_length_mean"].get<double>() == rows[1]["response_length_mean"].get<double>());
  for (const char* key : {"loss", "grad_norm", "moe_aux_loss", "moe_route_agreement"}) {
    INFO(key);
    CHECK(step_ep[key].get<double>() == Approx(rows[1][key].get<double>()).epsilon(1e-5).margin(1e-7));
  }
  areal::io::CheckpointReader ep_saved((ep_dir / "checkpoint").string());
  CHECK(ep_saved.names() == initial.names());
  CHECK_FALSE(at::equal(ep_saved.read(expert), initial.read(expert)));
}

// Context parallelism (actor.backend fsdp:d1c2 at np 2, fsdp:d2c2 at np 4) and tensor
// parallelism (fsdp:d1t2 at np 2, fsdp:d1t2c2 at np 4): a group's ranks take the same
// prompts, generate the same answers and train on their chunks of them or their slices
// of the layers (log-probs and entropies from the vocabulary's columns); two GRPO steps
// with a KL reference, recomputed log-probs and two minibatches give one process's figures.
TEST_CASE("rl job: GRPO with context and tensor parallelism gives one process's steps", "[rl][binary][mpi]") {
  const fs::path root = fresh_dir("context");
  int runs = 0;
  auto steps = [&](int np, const std::string& backend, const std::string& extra = "") {
    const fs::path dir = root / (std::to_string(np) + backend.substr(5) + "_" + std::to_string(runs++));
    Result r = run(kMpirun + " -np " + std::to_string(np) + " " + kBin + " --config configs/ci_smoke.yaml total_train_steps=2"
                   " valid_dataset.path= stats_logger.tensorboard.path= actor.backend=" + backend +
                   // A random model earns no reward: a constant advantage of 1 still moves the policy.
                   " actor.reward_bias=1 actor.adv_norm.mean_level=none actor.adv_norm.std_level=none actor.kl_ctl=0.1"
                   " actor.recompute_logprob=true actor.ppo_n_minibatches=2 cluster.fileroot=" + dir.string() + extra);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    if (backend.find("c2") != std::string::npos) CHECK_THAT(r.output, Contains("every sequence over 2 ranks"));
    if (backend.find("t2") != std::string::npos) CHECK_THAT(r.output, Contains("data-parallel group"));
    std::vector<json> rows = read_jsonl(dir / "ci-smoke" / "trial0" / "stats.jsonl");
    REQUIRE(rows.size() == 2);
    return rows;
  };
  const std::vector<json> one = steps(1, "fsdp:d1");
  CHECK(one[1]["kl"].get<double>() > 0);
  // One process's update is one packed micro-batch whose groups share their prompts
  // (actor.share_prompts, the default); without sharing, padded rows: more tokens run,
  // the same steps.
  const std::vector<json> unshared = steps(1, "fsdp:d1", " actor.share_prompts=false");
  for (size_t i = 0; i < 2; ++i) {
    INFO("step " << i + 1);
    CHECK(unshared[i]["train_forward_tokens"].get<double>() > one[i]["train_forward_tokens"].get<double>());
    for (const char* key : {"loss", "grad_norm", "kl", "entropy"})
      CHECK(unshared[i][key].get<double>() == Approx(one[i][key].get<double>()).epsilon(1e-4).margin(1e-7));
  }
  // Also packed micro-batches whose answers share their prompt (actor.share_prompts),
  // data- and tensor-parallel: each group's prompt runs once in the update, the log-prob
  // recomputation and the KL reference's forward.
  const std::vector<std::tuple<int, std::string, std::string>> shapes = {
      {2, "fsdp:d1c2", ""}, {4, "fsdp:d2c2", ""}, {2, "fsdp:d1t2", ""}, {4, "fsdp:d1t2c2", ""},
      {2, "fsdp:d2", " actor.mb_spec.max_tokens_per_mb=200"}, {2, "fsdp:d1t2", " actor.mb_spec.max_tokens_per_mb=200"}};
  for (const auto& [np, backend, extra] : shapes) {
    const std::vector<json> got = steps(np, backend, extra);
    for (size_t i = 0; i < 2; ++i)
      for (const char* key : {"reward_mean", "response_length_mean", "loss", "grad_norm", "kl", "entropy", "clip_fraction"}) {
        INFO(backend << ", step " << i + 1 << ", " << key);
        CHECK(got[i][key].get<double>() == Approx(one[i][key].get<double>()).epsilon(1e-4).margin(1e-7));
      }
  }
}

TEST_CASE("rl job: the first GRPO step gives the same stats for N = 1 and N = 2",
          "[rl][binary][mpi][slow][demo_checkpoint]") {
  const fs::path root = fresh_dir("n1n2");
  // A warmed-up model, so that some sampled answers are right and advantages are not all
  // zero (checked below: reward_mean and reward_std > 0). Under CTest it is the demo's
  // warm-up checkpoint (AREAL_DEMO_CHECKPOINT, the demo_warmup fixture: about 40% greedy
  // accuracy), trained once for this test and both demo tests; run alone, the test trains
  // a shorter warm-up itself (800 steps: about 30%; at 400 the model is still at the edge
  // of learning the task, and whether any of the step's answers is right is down to luck).
  const char* shared = std::getenv("AREAL_DEMO_CHECKPOINT");
  std::string checkpoint = shared ? shared : "";
  if (checkpoint.empty()) {
    Result warm = run(kMpirun + " -np 2 " + kBin + " --config configs/demo_sft_warmup.yaml total_train_steps=800 "
                      "cluster.fileroot=" + root.string());
    REQUIRE(warm.exit_code == 0);
    checkpoint = (root / "demo" / "sft-warmup" / "checkpoint").string();
  }
  REQUIRE(fs::exists(fs::path(checkpoint) / "config.json"));
  int runs = 0;
  std::string last_output;
  auto first_step = [&](int n, const std::string& extra = "") {
    const fs::path dir = root / ("n" + std::to_string(n) + "_" + std::to_string(runs++));
    Result r = run(kMpirun + " -np " + std::to_string(n) + " " + kBin + " --config configs/demo_grpo.yaml --model_path " +
                   checkpoint + " total_train_steps=1 valid_dataset.path= stats_logger.tensorboard.path= cluster.fileroot=" +
                   dir.string() + " " + extra);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    last_output = r.output;
    std::vector<json> rows = read_jsonl(dir / "demo" / "grpo" / "stats.jsonl");
    REQUIRE(rows.size() == 1);
    return rows[0];
  };
  json one = first_step(1), two = first_step(2);
  // The behaviour log-probs kept by the rollout are those the training engine computes:
  // recomputing them (actor.recompute_logprob) gives the same step.
  json recomputed = first_step(2, "actor.recompute_logprob=true");
  for (const char* key : {"reward_mean", "loss", "grad_norm", "clip_fraction"})
    CHECK(recomputed[key].get<double>() == Approx(two[key].get<double>()).epsilon(1e-4).margin(1e-6));
  // Decoupled PPO on fresh samples: the proximal policy is the behaviour one, every
  // weight exp(proximal - behaviour) is 1 up to rounding, so it is the same step too.
  // AReaL's rejection_sampling spelled on the command line; nothing is stale, nothing filtered.
  json decoupled = first_step(2, "actor.use_decoupled_loss=true actor.rejection_sampling.level=token "
                                 "actor.rejection_sampling.upper=5");
  for (const char* key : {"reward_mean", "loss", "grad_norm", "clip_fraction"})
    CHECK(decoupled[key].get<double>() == Approx(recomputed[key].get<double>()).epsilon(1e-4).margin(1e-6));
  CHECK(decoupled["rejection_filtered_share"].get<double>() == 0.0);
  // One minibatch without KL: the recomputed log-probs come from the update's own forward
  // (no separate one); the same step as the separate recompute (decoupled PPO still runs it).
  json fused = first_step(2, "actor.ppo_n_minibatches=1 actor.recompute_logprob=true");
  CHECK_THAT(last_output, Contains("from the update's own forward"));
  json separate = first_step(2, "actor.ppo_n_minibatches=1 actor.use_decoupled_loss=true");
  for (const char* key : {"reward_mean", "loss", "grad_norm", "clip_fraction"})
    CHECK(fused[key].get<double>() == Approx(separate[key].get<double>()).epsilon(1e-4).margin(1e-6));
  // Tensor-parallel generation (both ranks generate the batch together, each holding
  // half of every weight) samples the same answers: the same step.
  json tensor_parallel = first_step(2, "rollout.backend=sglang:d1t2 actor.backend=fsdp:d2");
  for (const char* exact : {"reward_mean", "accuracy", "response_length_mean", "response_length_max"})
    CHECK(tensor_parallel[exact].get<double>() == two[exact].get<double>());
  for (const char* close : {"loss", "grad_norm", "clip_fraction"})
    CHECK(tensor_parallel[close].get<double>() == Approx(two[close].get<double>()).epsilon(1e-4).margin(1e-6));
  // Each rank held half of the policy (the norms whole), not the whole of it.
  CHECK(tensor_parallel["rollout_weight_bytes"].get<double>() < 0.55 * two["rollout_weight_bytes"].get<double>());
  CHECK(tensor_parallel["rollout_weight_bytes"].get<double>() > 0.45 * two["rollout_weight_bytes"].get<double>());
  // LoRA with a KL penalty: once the adapters have moved, the policy differs from the
  // reference (the base with adapters off) and the KL becomes non-zero.
  {
    const fs::path dir = root / "lora";
    Result r = run(kMpirun + " -np 2 " + kBin + " --config configs/demo_grpo.yaml --model_path " + checkpoint +
                   " total_train_steps=2 valid_dataset.path= stats_logger.tensorboard.path= actor.use_lora=true"
                   " actor.lora_rank=8 actor.kl_ctl=0.1 optimizer.lr=1e-2 cluster.fileroot=" + dir.string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    std::vector<json> rows = read_jsonl(dir / "demo" / "grpo" / "stats.jsonl");
    REQUIRE(rows.size() == 2);
    CHECK(rows[0]["kl"].get<double>() == Approx(0.0).margin(1e-6));  // the adapters start at B = 0
    CHECK(std::abs(rows[1]["kl"].get<double>()) > 1e-6);
  }
  INFO("N=1: " << one.dump() << "\nN=2: " << two.dump());
  CHECK(one["reward_mean"].get<double>() > 0);  // a step with something to learn from
  CHECK(one["reward_std"].get<double>() > 0);
  // The same answers: each is sampled with its prompt's own seed, whichever rank generates it.
  for (const char* exact : {"reward_mean", "accuracy", "response_length_mean", "response_length_max", "truncated_share"})
    CHECK(one[exact].get<double>() == two[exact].get<double>());
  // The same update up to floating-point reduction order.
  for (const char* close : {"loss", "entropy", "grad_norm", "clip_fraction"})
    CHECK(one[close].get<double>() == Approx(two[close].get<double>()).epsilon(1e-4).margin(1e-6));
}

TEST_CASE("rl job: with LoRA the KL reference is the base model, and the adapters are saved", "[rl][binary][mpi]") {
  const fs::path root = fresh_dir("lora");
  // A reward bias without normalization, so that the adapters move although the tiny model earns no reward.
  Result r = run(kMpirun + " -np 2 " + kBin + " --config configs/ci_smoke.yaml --actor.use_lora true --actor.lora_rank 4"
                 " --actor.kl_ctl 0.1 --saver.merge_lora true --actor.reward_bias 1 --actor.adv_norm.mean_level none"
                 " --actor.adv_norm.std_level none --optimizer.lr 1e-2 --cluster.fileroot " + root.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::vector<json> rows = read_jsonl(root / "ci-smoke" / "trial0" / "stats.jsonl");
  REQUIRE(rows.size() == 4);
  // Before any update the adapters are zero (B = 0): policy = reference, KL exactly 0.
  CHECK(rows[1]["kl"].get<double>() == Approx(0.0).margin(1e-6));
  for (const char* file : {"checkpoint/adapter_model.safetensors", "checkpoint/adapter_config.json",
                           "checkpoint-merged/model.safetensors"})
    CHECK(fs::exists(root / "ci-smoke" / "trial0" / file));

  // A new run continues from the saved adapters (actor.lora_adapter_path): they are not
  // zero, so from its first step the policy differs from the base (the KL reference).
  const fs::path again = fresh_dir("lora_again");
  Result next = run(kMpirun + " -np 2 " + kBin + " --config configs/ci_smoke.yaml --actor.use_lora true --actor.lora_rank 4"
                    " --actor.kl_ctl 0.1 --total_train_steps 1 --actor.lora_adapter_path " +
                    (root / "ci-smoke" / "trial0" / "checkpoint").string() + " --cluster.fileroot " + again.string());
  INFO(next.output);
  REQUIRE(next.exit_code == 0);
  CHECK_THAT(next.output, Contains("LoRA adapters from"));
  rows = read_jsonl(again / "ci-smoke" / "trial0" / "stats.jsonl");
  REQUIRE(rows.size() == 3);
  CHECK(rows[1]["kl"].get<double>() > 1e-6);
}

TEST_CASE("rl job: actor.loss_agg_mode aggregates the first update's token losses as named", "[rl][binary][mpi]") {
  // Every score is clipped to 0.5 whatever the reward ((r + 1) * 1 clipped to +-0.5), no
  // KL, no normalization: every answer token's advantage is 0.5. The first update is on
  // policy (ratio 1), so each token's loss is -0.5 and the minibatch loss is -0.5 per
  // unit: -0.5 (token-mean, seq-mean-token-mean), -0.5 x the mean answer length
  // (seq-mean-token-sum), that over max_new_tokens = 16 (seq-mean-token-sum-norm).
  const std::string base = " --config configs/ci_smoke.yaml --total_train_steps 1 --actor.ppo_n_minibatches 1"
                           " --actor.kl_ctl 0 --actor.reward_bias 1 --actor.reward_clip 0.5 --actor.recompute_logprob true"
                           " --actor.adv_norm.mean_level none --actor.adv_norm.std_level none";
  for (const char* mode : {"token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"}) {
    INFO(mode);
    const fs::path root = fresh_dir(std::string("agg_") + mode);
    Result r = run(kMpirun + " -np 2 " + kBin + base + " --actor.loss_agg_mode " + mode +
                   " --cluster.fileroot " + root.string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    std::vector<json> rows = read_jsonl(root / "ci-smoke" / "trial0" / "stats.jsonl");
    REQUIRE(rows.size() == 3);
    const double length = rows[1]["response_length_mean"].get<double>();
    const std::string m = mode;
    const double expected = m == "seq-mean-token-sum"        ? -0.5 * length
                            : m == "seq-mean-token-sum-norm" ? -0.5 * length / 16
                                                             : -0.5;
    CHECK(rows[1]["loss"].get<double>() == Approx(expected).epsilon(1e-5));
  }
}

TEST_CASE("rl job: DAPO's refill (dynamic_bs false) trains every step on batch_size groups with a signal",
          "[rl][binary][mpi][python][dapo]") {
  // A reward that scores about half the answers 1 whatever the model: some groups of two
  // carry a signal, some do not.
  const std::string base = kMpirun + " -np 2 " + kBin + " --config configs/ci_smoke.yaml --total_train_epochs 2"
                           " --total_train_steps 3 --actor.dynamic_sampling true '--reward_fn=command:" + python_bin() +
                           " scripts/rewards/worker.py tests/python/parity_reward.py:parity_reward_fn'";
  auto steps_of = [](const fs::path& root) {
    std::vector<json> steps;
    for (const json& row : read_jsonl(root / "ci-smoke" / "trial0" / "stats.jsonl"))
      if (row.contains("loss")) steps.push_back(row);
    return steps;
  };
  // Refill: every step trains on exactly 4 groups (train_dataset.batch_size), generating
  // more rounds where the batch had groups without a signal.
  const fs::path refill = fresh_dir("refill");
  Result r = run(base + " --dynamic_bs false --cluster.fileroot " + refill.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::vector<json> steps = steps_of(refill);
  REQUIRE(steps.size() == 3);
  double rounds = 0;
  for (const json& step : steps) {
    CHECK(step["dynamic_sampling_kept_groups"].get<double>() == 4);
    rounds += step["refill_rounds"].get<double>();
  }
  CHECK(rounds >= 1);
  // Without the refill (AReaL's dynamic_bs: true) some step trains on fewer groups.
  const fs::path smaller = fresh_dir("no_refill");
  Result s = run(base + " --dynamic_bs true --cluster.fileroot " + smaller.string());
  INFO(s.output);
  REQUIRE(s.exit_code == 0);
  steps = steps_of(smaller);
  REQUIRE(steps.size() == 3);
  double fewest = 4;
  for (const json& step : steps) {
    CHECK_FALSE(step.contains("refill_rounds"));
    fewest = std::min(fewest, step["dynamic_sampling_kept_groups"].get<double>());
  }
  CHECK(fewest < 4);
}

TEST_CASE("rl job: bad input ends every rank with a message naming it", "[rl][binary][mpi]") {
  const fs::path root = fresh_dir("bad");
  const fs::path data = root / "prompts.jsonl";
  std::ofstream(data) << R"({"prompt": "1+1=", "answer": "2"})" "\n" << "{\"prompt\": \"2+2=\"\n";
  const std::string base = kMpirun + " -np 2 " + kBin + " --job rl --init_from_scratch true --actor.dtype float32 " +
                           "--cluster.fileroot " + root.string() + " ";
  Result bad_line = run(base + "--train_dataset.path " + data.string() + " --train_dataset.batch_size 2");
  CHECK(bad_line.exit_code != 0);
  CHECK_THAT(bad_line.output, Contains(data.string() + ":2: not a JSON object"));
  Result missing = run(base + "--train_dataset.path /no/such/prompts.jsonl --train_dataset.batch_size 2");
  CHECK(missing.exit_code != 0);
  CHECK_THAT(missing.output, Contains("/no/such/prompts.jsonl: cannot read the dataset"));
  Result reward = run(base + "--train_dataset.path builtin:arithmetic/train --reward_fn f1");
  CHECK(reward.exit_code == 2);
  CHECK_THAT(reward.output, Contains("reward_fn") && Contains("exact_match"));
  Result odd = run(base + "--train_dataset.path builtin:arithmetic/train --train_dataset.batch_size 3");
  CHECK(odd.exit_code != 0);
  CHECK_THAT(odd.output, Contains("'train_dataset.batch_size' = 3 must be a multiple of the training ranks (2)"));
  const fs::path unsupported = root / "wordpiece";
  fs::create_directories(unsupported);
  std::ofstream(unsupported / "tokenizer.json") << R"({"model": {"type": "WordPiece", "vocab": {}}})";
  Result tok = run(base + "--train_dataset.path builtin:arithmetic/train --train_dataset.batch_size 2 --tokenizer_path " +
                   unsupported.string());
  CHECK(tok.exit_code != 0);
  CHECK_THAT(tok.output, Contains("tokenizer model type 'WordPiece' is not supported"));
}

TEST_CASE("rl job: a config error on one rank only ends every rank, printing it", "[rl][binary][mpi]") {
  // Issue 26, defect 5: a reward command that cannot start on rank 1 only (as a Python
  // module missing on one node) raised on rank 1 alone; it finalized MPI while rank 0
  // went on into the staged init's collectives and waited there, and the message was
  // never printed (the job hung until timeout's 124).
  const fs::path root = fresh_dir("one_rank");
  const std::string reward =
      R"( --reward_fn "command:sh -c 'if [ \"\$OMPI_COMM_WORLD_RANK\" = 1 ]; then exit 3; fi; cat >/dev/null'")";
  Result r = run("timeout 60 " + kMpirun + " -np 2 " + kBin + " --config configs/ci_smoke.yaml --cluster.fileroot " +
                 root.string() + reward);
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.seconds < 30);
  CHECK_THAT(r.output, Contains("rank 1: option 'reward_fn'"));
  CHECK_THAT(r.output, !Contains("staged init"));  // refused before the load
}

TEST_CASE("rl job: non-finite losses are skipped with a warning, and three in a row stop the job", "[rl][binary][mpi]") {
  const fs::path root = fresh_dir("nan");
  // Advantages of 1 everywhere (reward bias, no normalization) and a learning rate of
  // 1e20: the first update blows the weights up, the next minibatches' losses are NaN.
  Result r = run(kMpirun + " -np 2 " + kBin +
                 " --job rl --init_from_scratch true --actor.dtype float32 --train_dataset.path builtin:arithmetic/train"
                 " --train_dataset.batch_size 4 --gconfig.n_samples 2 --actor.group_size 2 --actor.ppo_n_minibatches 4"
                 " --gconfig.max_new_tokens 4 --actor.reward_bias 1 --actor.adv_norm.mean_level none"
                 " --actor.adv_norm.std_level none --actor.kl_ctl 0 --optimizer.lr 1e20 --optimizer.gradient_clipping 0"
                 " --total_train_steps 5 --cluster.fileroot " + root.string());
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.seconds < 60);
  CHECK_THAT(r.output, Contains("step 1 minibatch 2: the loss is not finite; the update was skipped") &&
                           Contains("3 updates in a row had a non-finite loss; stopping"));
}

// One epoch of 8 prompts with train_dataset.drop_last false: batch 6 gives a full batch
// and a partial one of 2, both in epoch 0; batch 10 gives one batch of all 8 (and ends).
TEST_CASE("rl job: drop_last false keeps the partial last batch inside its epoch", "[rl][binary][mpi]") {
  const fs::path root = fresh_dir("drop_last");
  const std::string base = "timeout 120 " + kMpirun + " -np 2 " + kBin + " --config configs/ci_smoke.yaml total_train_steps=0 "
                           "total_train_epochs=1 train_dataset.drop_last=false valid_dataset.path= "
                           "stats_logger.tensorboard.path= cluster.fileroot=" + root.string();
  const fs::path stats = root / "ci-smoke" / "trial0" / "stats.jsonl";
  {
    Result r = run(base + " train_dataset.batch_size=6");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Contains("2 steps per epoch, 2 steps"));
    std::vector<json> rows = read_jsonl(stats);
    REQUIRE(rows.size() == 2);
    CHECK(rows[0]["epoch"] == 0);
    CHECK(rows[0]["prompts"] == 6);
    CHECK(rows[1]["epoch"] == 0);
    CHECK(rows[1]["prompts"] == 2);
  }
  {
    Result r = run(base + " train_dataset.batch_size=10");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(r.seconds < 60);
    CHECK_THAT(r.output, Contains("1 steps per epoch, 1 steps"));
    std::vector<json> rows = read_jsonl(stats);
    REQUIRE(rows.size() == 1);
    CHECK(rows[0]["prompts"] == 8);
  }
}

// reward_fn: command:... on the CI smoke config: the example GSM8K worker (math-verify)
// scores every answer of two steps and the evaluations, two workers per rank, none failing.
TEST_CASE("rl job: a Python reward command scores the answers under mpirun -np 2", "[rl][binary][mpi][python]") {
  const fs::path root = fresh_dir("reward_command");
  const std::string command = "command:" + python_bin() +
                              " scripts/rewards/worker.py scripts/rewards/gsm8k.py:gsm8k_reward_fn";
  Result r = run(kMpirun + " -np 2 " + kBin + " --config configs/ci_smoke.yaml cluster.fileroot=" + root.string() +
                 " '--reward_fn=" + command + "' --reward_workers 2");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::vector<json> rows = read_jsonl(root / "ci-smoke" / "trial0" / "stats.jsonl");
  int steps = 0;
  for (const json& row : rows) {
    if (!row.contains("reward_failures")) continue;
    ++steps;
    CHECK(row["reward_failures"].get<double>() == 0);
  }
  CHECK(steps == 2);
  CHECK(r.output.find("reward command") == std::string::npos);  // no warning about failed calls
}

TEST_CASE("rl job: gconfig.stop ends answers at a stop string through the binary", "[rl][binary]") {
  // The same seeded run with and without stop strings that the untrained model writes
  // often (digits): with them, answers end early and fewer reach max_new_tokens.
  const std::string base = kBin + " --job rl --init_from_scratch true --train_dataset.path builtin:arithmetic/train"
                           " --train_dataset.batch_size 4 --gconfig.n_samples 2 --actor.group_size 2"
                           " --gconfig.max_new_tokens 24 --total_train_steps 1 --cluster.fileroot ";
  std::vector<json> stats;
  for (const std::string stop : {"", " --gconfig.stop [5,0,1]"}) {
    const fs::path root = fresh_dir(stop.empty() ? "stop_none" : "stop_digits");
    Result r = run(base + root.string() + stop);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    stats.push_back(read_jsonl(root / "areal-train" / "trial0" / "stats.jsonl").at(0));
  }
  CHECK(stats[1]["response_length_mean"].get<double>() < stats[0]["response_length_mean"].get<double>());
  CHECK(stats[1]["truncated_share"].get<double>() < stats[0]["truncated_share"].get<double>());
}
