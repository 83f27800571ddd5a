// AReaL's own config files: tests/fixtures/areal/ holds every example config of AReaL's
// examples/math/ byte for byte (the commit is in its README). Each one loads as written
// with AReaL's meaning and runs two small steps, with the overrides an AReaL user would
// type on the command line to point it at a local model and data; or, for what
// areal-train does not have, is refused naming it. Every key of every file is an
// option, an alias, or listed as ignored or refused (and so documented).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "areal/config/areal_compat.h"
#include "areal/config/loader.h"
#include "areal/config/validate.h"
#include "areal/util/error.h"
#include "jsonl_rows.h"
#include "run_binary.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using namespace areal;
using Catch::Matchers::Contains;

namespace {

const std::string kFixtures = "tests/fixtures/areal/";
const std::string kGrpo = kFixtures + "gsm8k_grpo.yaml";

// What makes AReaL's example a small local run here, in AReaL's spellings: the test
// model and GSM8K-shaped data in the layout of a Hugging Face download (train and test
// splits of its main config, read by their fields as AReaL's GSM8K loader does), two steps of 4 prompts x 2 answers of at most 16 tokens, colocated on
// 2 ranks, float32 for a CPU. `job` and `reward_fn` are areal-train's own (AReaL picks
// them by the script it runs, and passes gsm8k_reward_fn from Python).
const std::vector<Override> kSmallRun = {
    {"job", "rl"},
    {"reward_fn", "math"},
    {"actor.path", "tests/fixtures/models/tiny_chat"},
    {"actor.dtype", "float32"},
    {"total_train_steps", "2"},
    {"gconfig.n_samples", "2"},
    {"gconfig.max_new_tokens", "16"},
    {"train_dataset.batch_size", "4"},
    {"valid_dataset.batch_size", "8"},
    {"train_dataset.path", "tests/fixtures/datasets/gsm8k"},
    {"valid_dataset.path", "tests/fixtures/datasets/gsm8k"},
    {"rollout.backend", "sglang:d2p1t1"},
    {"actor.backend", "fsdp:d2p1t1"},
};

std::string command_line(const std::vector<Override>& overrides) {
  std::string out;
  for (const Override& o : overrides) out += " " + o.key + "=" + o.value;
  return out;
}

std::string text_of(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool ignored(const Config& cfg, const std::string& key) {
  for (const std::string& note : cfg.ignored_keys)
    if (note.rfind(key + ":", 0) == 0) return true;
  return false;
}

// Loads an example from the source folder (relative paths as the tests run it).
Config load_example(const std::string& file, std::vector<Override> overrides = {}) {
  const fs::path previous = fs::current_path();
  fs::current_path(source_dir());
  try {
    Config cfg = load_config(kFixtures + file, overrides);
    validate_config(cfg);
    fs::current_path(previous);
    return cfg;
  } catch (...) {
    fs::current_path(previous);
    throw;
  }
}

std::vector<Override> small_run(std::vector<Override> extra = {}) {
  std::vector<Override> all = kSmallRun;
  all.insert(all.end(), extra.begin(), extra.end());
  return all;
}

}  // namespace

TEST_CASE("AReaL configs: the GSM8K GRPO example loads as written, with AReaL's meaning", "[config][areal]") {
  const fs::path previous = fs::current_path();
  fs::current_path(source_dir());
  const Config as_written = load_config(kGrpo, {});
  fs::current_path(previous);
  // Aliases: actor.path, actor.optimizer.*; ${actor.path} resolves through them.
  CHECK(as_written.model_path == "Qwen/Qwen2.5-1.5B-Instruct");
  CHECK(as_written.tokenizer_path == "Qwen/Qwen2.5-1.5B-Instruct");
  CHECK(as_written.optimizer.lr == Approx(1.7e-5));
  CHECK(as_written.optimizer.weight_decay == Approx(0.017));
  CHECK(as_written.optimizer.eps == Approx(1e-8));
  // GRPO as AReaL means it: group-normalized rewards, batch-normalized advantages,
  // the decoupled loss with its filter of stale tokens (AReaL's rejection_sampling).
  CHECK(as_written.actor.reward_norm.mean_level == "group");
  CHECK(as_written.actor.reward_norm.std_level == "group");
  CHECK(as_written.actor.reward_norm.group_size == 4);  // ${gconfig.n_samples}
  CHECK(as_written.actor.adv_norm.mean_level == "batch");
  CHECK(as_written.actor.use_decoupled_loss);
  CHECK(as_written.actor.rejection_sampling.level == "token");
  CHECK(as_written.actor.rejection_sampling.action == "mask");
  CHECK(as_written.actor.rejection_sampling.metric == "ratio");
  CHECK(as_written.actor.rejection_sampling.upper == 5.0);
  CHECK(std::isinf(as_written.actor.rejection_sampling.lower));
  CHECK(as_written.actor.gradient_checkpointing);
  CHECK(as_written.actor.mb_spec.max_tokens_per_mb == 10240);
  CHECK(as_written.actor.mb_spec.packing_algorithm == "ffd");
  CHECK(as_written.gconfig.n_samples == 4);
  // null is AReaL's None: unset.
  CHECK(as_written.saver.freq_steps == 0);
  CHECK(as_written.saver.freq_epochs == 1);
  CHECK(as_written.evaluator.freq_epochs == 1);
  CHECK(as_written.recover.freq_secs == 3600);
  // What areal-train does differently is read and listed, not used.
  for (const char* key : {"enable_offload", "cluster.n_nodes", "cluster.name_resolve", "scheduler",
                          "rollout.experiment_name", "actor.weight_update_mode",
                          "actor.scheduling_spec", "ref", "sglang", "vllm", "train_dataset.num_workers",
                          "stats_logger.wandb", "perf_tracer", "saver.fileroot"}) {
    INFO(key);
    CHECK(ignored(as_written, key));
  }
  // The warning's line: the keys of one reason together.
  CHECK_THAT(ignored_keys_summary({"a: why 1", "b: why 2", "c: why 1"}), Contains("a, c (why 1); b (why 2)"));
  // Options are never listed as ignored; AReaL's queue options are read as written.
  CHECK(as_written.rollout.max_head_offpolicyness == 2);
  CHECK(as_written.rollout.consumer_batch_size == as_written.train_dataset.batch_size);
  CHECK(as_written.rollout.max_concurrent_rollouts == 256);
  CHECK(as_written.rollout.queue_size == 0);
  CHECK_FALSE(ignored(as_written, "rollout.max_head_offpolicyness"));
  CHECK_FALSE(ignored(as_written, "actor.path"));
  CHECK_FALSE(ignored(as_written, "actor.optimizer"));
  // The small run's overrides reach through the references: group_size follows n_samples.
  const Config small = load_example("gsm8k_grpo.yaml", small_run());
  CHECK(small.actor.reward_norm.group_size == 2);
  CHECK(small.model_path == "tests/fixtures/models/tiny_chat");
  CHECK(small.tokenizer_path == "tests/fixtures/models/tiny_chat");
}

TEST_CASE("AReaL configs: every key of every example is an option, an alias, or listed", "[config][areal][docs]") {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(source_path(kFixtures))) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    INFO(entry.path().filename().string());
    CHECK(unlisted_keys(entry.path().string()) == std::vector<std::string>{});
  }
  CHECK(files == 31);  // AReaL's examples/math/*.yaml, examples/multi_turn_math's and the other single-turn ones
  // The walk does find what is unknown, as the file spells it.
  const fs::path probe = fs::temp_directory_path() / ("areal_unlisted_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(probe) << "actor:\n  eps_clip: 0.2\n  new_knob: 1\n  optimizer: {lr: 1, fancy: 2}\nsglang: {x: 1}\n";
  CHECK(unlisted_keys(probe.string()) == std::vector<std::string>{"actor.new_knob", "actor.optimizer.fancy"});
  fs::remove(probe);
}

TEST_CASE("AReaL configs: spellings, hub ids and unknown keys", "[config][areal]") {
  // Both spellings of one option: refused, naming both places.
  CHECK_THROWS_WITH(load_config_text("model_path: /a\nactor:\n  path: /b\n", "both.yaml", {}),
                    Contains("'model_path' is set twice") && Contains("spelled 'actor.path'"));
  // AReaL's spelling on the command line, and an ignored key there.
  Config cli = load_config_text("", "empty.yaml", {{"actor.fsdp.memory_efficient_load", "true"}, {"sglang.dtype", "x"}});
  CHECK(cli.fsdp.memory_efficient_load);
  CHECK(ignored(cli, "sglang.dtype"));
  // An unknown key stays an error with a suggestion.
  CHECK_THROWS_WITH(load_config_text("actor:\n  eps_clipp: 0.2\n", "typo.yaml", {}), Contains("eps_clip"));
  // null where AReaL's type is not Optional is still an error.
  CHECK_THROWS_WITH(load_config_text("seed:\n", "seed.yaml", {}), Contains("'seed' has no value"));
  // A hub id instead of a local path: what to do about it, before anything loads.
  Config hub = load_config_text("job: rl\ntrain_dataset:\n  path: openai/gsm8k\nactor:\n  path: Qwen/Qwen2.5-0.5B\n",
                                "hub.yaml", {});
  CHECK_THROWS_WITH(validate_config(hub), Contains("openai/gsm8k") && Contains("Hugging Face hub id") &&
                                              Contains("--repo-type dataset"));
  hub.train_dataset.path = source_path("configs/data/gsm8k_smoke.jsonl");
  CHECK_THROWS_WITH(validate_config(hub), Contains("Qwen/Qwen2.5-0.5B") && Contains("Hugging Face hub id") &&
                                              Contains("huggingface-cli download"));
}

TEST_CASE("AReaL configs: docs/configuration.md lists every alias and every ignored key", "[config][areal][docs]") {
  const std::string docs = text_of(source_path("docs/configuration.md"));
  for (const OptionAlias& a : option_aliases()) {
    INFO(a.areal_name);
    CHECK_THAT(docs, Contains("`" + a.areal_name + "`") && Contains("`" + a.option + "`"));
  }
  for (const IgnoredKey& k : ignored_areal_keys()) {
    INFO(k.pattern);
    CHECK_THAT(docs, Contains("`" + k.pattern + "`"));
  }
}

TEST_CASE("AReaL configs: the GSM8K GRPO example runs two steps under mpirun -np 2", "[config][areal][binary][mpi]") {
  const fs::path root = fs::temp_directory_path() / ("areal_areal_" + std::to_string(::getpid()));
  fs::remove_all(root);
  Result r = run(mpirun_cmd() + " -np 2 " + train_bin() + " --config " + kGrpo + command_line(kSmallRun) +
                 " cluster.fileroot=" + root.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // One warning, from rank 0, listing what is ignored; the filter needs no warning.
  const std::string warning = "AReaL key(s) that areal-train does differently";
  CHECK(r.output.find(warning) != std::string::npos);
  CHECK(r.output.find(warning) == r.output.rfind(warning));
  CHECK(r.output.find("use_decoupled_loss") == std::string::npos);
  std::vector<nlohmann::json> rows = read_jsonl(root / "gsm8k-grpo" / "trial0" / "stats.jsonl");
  int steps = 0;
  for (const auto& row : rows) {
    if (!row.contains("loss")) continue;
    ++steps;
    CHECK(row.contains("rejection_filtered_share"));  // the filter ran
  }
  CHECK(steps == 2);
  fs::remove_all(root);
}

// AReaL's multi-turn math example: its two keys (agent_run_args.max_turns, export_style)
// and the rest of the GRPO example. Its Python script retries a wrong answer with
// AReaL's message, which is the default environment here; the tiny model answers no
// GSM8K question, so every episode takes both turns where they fit.
TEST_CASE("AReaL configs: the multi-turn math example loads as written and runs two steps of episodes",
          "[config][areal][binary][mpi][episodes]") {
  const Config mt = load_example("gsm8k_grpo_mt.yaml", small_run());
  CHECK(mt.agent_run_args.max_turns == 2);
  CHECK(mt.export_style == "concat");
  CHECK(mt.env.empty());
  const fs::path root = fs::temp_directory_path() / ("areal_areal_mt_" + std::to_string(::getpid()));
  fs::remove_all(root);
  Result r = run(mpirun_cmd() + " -np 2 " + train_bin() + " --config " + kFixtures + "gsm8k_grpo_mt.yaml" +
                 command_line(kSmallRun) + " cluster.fileroot=" + root.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  int steps = 0;
  for (const auto& row : read_jsonl(root / "gsm8k-grpo" / "trial0" / "stats.jsonl")) {
    if (!row.contains("loss")) continue;
    ++steps;
    // 8 episodes a step: each wrong first answer is asked again unless the retry message
    // would not fit the test model's 256 positions (then the episode ends there, counted).
    const double cut = row["episodes_ended_by_limit"].get<double>();
    CHECK(cut < 8);
    CHECK(row["turns_mean"].get<double>() == Approx(2.0 - cut / 8));
    CHECK(row["masked_token_share"].get<double>() > 0.0);  // the retry message is not trained on
    CHECK(row["env_failures"].get<double>() == 0.0);
  }
  CHECK(steps == 2);
  fs::remove_all(root);
}

// AReaL's other critic-free examples: each means what AReaL means by it and runs two
// steps (the DAPO one also with dynamic sampling on, which AReaL turns on in its script).
TEST_CASE("AReaL configs: the Dr.GRPO GSPO DAPO RLOO LitePPO REINFORCE boba CPU NPU and LoRA examples load with their AReaL meaning and run",
          "[config][areal][binary][mpi][slow]") {
  const Config drgrpo = load_example("gsm8k_drgrpo.yaml", small_run());
  const Config gspo = load_example("gsm8k_gspo.yaml", small_run());
  const Config dapo = load_example("gsm8k_dapo_dynamic_bs.yaml", small_run({{"actor.overlong_tokens", "8"}}));
  const Config rloo = load_example("gsm8k_rloo.yaml", small_run());
  const Config liteppo = load_example("gsm8k_liteppo.yaml", small_run());
  const Config reinforce = load_example("gsm8k_reinforce.yaml", small_run());
  const Config baseline = load_example("gsm8k_reinforce_baseline.yaml", small_run());
  const Config lora = load_example("gsm8k_grpo_lora.yaml", small_run());
  const Config boba = load_example("boba_grpo.yaml", small_run());
  const Config cpu = load_example("gsm8k_grpo_cpu.yaml", small_run());
  // Dr.GRPO: the group mean only, no division by the group's std.
  CHECK(drgrpo.actor.reward_norm.mean_level == "group");
  CHECK(drgrpo.actor.reward_norm.std_level == "none");
  CHECK(drgrpo.actor.importance_sampling_level == "token");
  // GSPO: one ratio per answer.
  CHECK(gspo.actor.importance_sampling_level == "sequence");
  CHECK(gspo.actor.reward_norm.std_level == "group");
  // DAPO: clip-higher, the soft overlong penalty, a dynamic batch.
  CHECK(dapo.actor.eps_clip == Approx(0.2));
  CHECK(dapo.actor.eps_clip_higher == Approx(0.28));
  CHECK(dapo.actor.overlong_reward_penalty);
  CHECK(dapo.actor.overlong_penalty_factor == Approx(1.0));
  CHECK(dapo.dynamic_bs);  // the step trains on the groups that stay (no refill)
  // RLOO: the leave-one-out group mean as the baseline, no std.
  CHECK(rloo.actor.reward_norm.mean_level == "group");
  CHECK(rloo.actor.reward_norm.mean_leave1out);
  CHECK(rloo.actor.reward_norm.std_level == "none");
  // LitePPO: the group mean, the batch std.
  CHECK(liteppo.actor.reward_norm.mean_level == "group");
  CHECK(liteppo.actor.reward_norm.std_level == "batch");
  // REINFORCE++: no reward normalization (AReaL's null), batch-normalized advantages, a KL penalty.
  CHECK(reinforce.actor.reward_norm.mean_level == "none");
  CHECK(reinforce.actor.reward_norm.std_level == "none");
  CHECK(reinforce.actor.adv_norm.mean_level == "batch");
  CHECK(reinforce.actor.kl_ctl == Approx(0.001));
  CHECK(reinforce.actor.kl_estimator == "k1");
  // REINFORCE with a baseline: the group mean, no std, the k2 KL estimator.
  CHECK(baseline.actor.reward_norm.mean_level == "group");
  CHECK(baseline.actor.reward_norm.std_level == "none");
  CHECK(baseline.actor.kl_estimator == "k2");
  // GRPO with LoRA: AReaL's use_lora through ${rollout.use_lora}, rank 16 on every linear layer.
  CHECK(lora.actor.use_lora);
  CHECK(lora.actor.lora_rank == 16);
  CHECK(lora.actor.lora_alpha == 16);
  CHECK(lora.actor.target_modules == std::vector<std::string>{"all-linear"});
  CHECK(lora.optimizer.lr == Approx(1.7e-4));
  CHECK(ignored(lora, "rollout.use_lora"));
  CHECK(ignored(lora, "gconfig.lora_name"));
  // boba: 4 minibatches and staleness up to 4 versions; the CPU template: smaller micro-batches.
  CHECK(boba.actor.ppo_n_minibatches == 4);
  CHECK(boba.rollout.max_head_offpolicyness == 4);
  CHECK(cpu.actor.mb_spec.max_tokens_per_mb == 2048);
  CHECK(ignored(cpu, "actor.attn_impl"));

  const fs::path root = fs::temp_directory_path() / ("areal_algorithms_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"gsm8k_drgrpo.yaml", "gsm8k-grpo"},  // (sic: several of AReaL's files keep GRPO's name)
      {"gsm8k_gspo.yaml", "gsm8k-gspo"},
      {"gsm8k_dapo_dynamic_bs.yaml actor.overlong_tokens=8 actor.dynamic_sampling=true", "gsm8k-dapo"},
      {"gsm8k_rloo.yaml", "gsm8k-rloo"},
      {"gsm8k_liteppo.yaml", "gsm8k-grpo"},
      {"gsm8k_reinforce.yaml", "gsm8k-reinforce-plus-plus"},
      {"gsm8k_reinforce_baseline.yaml", "gsm8k-reinforce-baseline"},
      {"gsm8k_grpo_lora.yaml", "gsm8k-grpo"},
      {"boba_grpo.yaml", "boba_grpo"},
      {"gsm8k_grpo_cpu.yaml", "gsm8k-grpo-cpu"},
      {"gsm8k_grpo_npu.yaml", "gsm8k-grpo"}};  // NPU's environment is the launcher's: it runs as GRPO
  for (const auto& [args, experiment] : runs) {
    INFO(args);
    const fs::path fileroot = root / args.substr(0, args.find('.'));  // several keep GRPO's name
    Result r = run(mpirun_cmd() + " -np 2 " + train_bin() + " --config " + kFixtures + args + command_line(kSmallRun) +
                   " cluster.fileroot=" + fileroot.string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    int steps = 0;
    for (const auto& row : read_jsonl(fileroot / experiment / "trial0" / "stats.jsonl")) {
      if (!row.contains("loss")) continue;
      ++steps;
      if (experiment == "gsm8k-dapo") {
        REQUIRE(row.contains("dynamic_sampling_kept_share"));
        CHECK(row["dynamic_sampling_kept_share"].get<double>() >= 0.0);
        CHECK(row["dynamic_sampling_kept_share"].get<double>() <= 1.0);
      }
    }
    CHECK(steps == 2);
  }
  fs::remove_all(root);
}

// AReaL's single-turn examples outside examples/math: countdown (its reward is Python
// code in AReaL's script; here the run's reward_fn), the proximal-approximation example
// in its evaluation mode, SkyPilot's Ray config and the scaffolding ones. Each loads with
// its meaning and runs two steps; distillation, loglinear and TIR are refused above.
TEST_CASE("AReaL configs: the countdown, proximal-approximation, SkyPilot and scaffolding examples load and run",
          "[config][areal][binary][mpi][slow]") {
  const Config countdown = load_example("countdown_train_config.yaml", small_run());
  CHECK(countdown.experiment_name == "countdown-grpo");
  CHECK(countdown.actor.reward_scaling == Approx(10.0));
  CHECK(countdown.actor.reward_bias == Approx(-0.5));
  CHECK(countdown.actor.use_decoupled_loss);
  CHECK(countdown.actor.rejection_sampling.level == "token");  // a section without a level: AReaL's token
  CHECK(countdown.actor.rejection_sampling.upper == Approx(5.0));
  CHECK(countdown.actor.adv_norm.mean_level == "batch");
  CHECK(ignored(countdown, "actor.pad_to_maximum"));
  const Config prox = load_example("gsm8k_grpo_prox_approx_eval.yaml", small_run());
  CHECK(prox.actor.use_decoupled_loss);
  CHECK(prox.actor.recompute_logprob);
  CHECK(ignored(prox, "actor.prox_logp_method"));  // metrics: recompute, without the approximation's metrics
  const std::vector<Override> local = {{"actor.path", "tests/fixtures/models/tiny_chat"},
                                       {"train_dataset.path", "tests/fixtures/datasets/gsm8k"},
                                       {"valid_dataset.path", "tests/fixtures/datasets/gsm8k"}};
  const Config ray = load_example("gsm8k_grpo_ray.yaml", local);  // its 8 + 8 ranks as written
  CHECK(ray.rollout.backend == "sglang:d8");
  CHECK(ray.actor.backend == "fsdp:d8");
  const Config scaffolding = load_example("gsm8k_rlvr_scaffolding_2nodes.yaml", local);
  CHECK(scaffolding.allocation_mode == "sglang:d8+d8");

  const fs::path root = fs::temp_directory_path() / ("areal_single_turn_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"countdown_train_config.yaml", "countdown-grpo"},
      {"gsm8k_grpo_prox_approx_eval.yaml", "gsm8k-grpo-prox-approx-eval"},
      {"gsm8k_grpo_ray.yaml", "gsm8k-grpo-on-ray"},
      {"gsm8k_rlvr_scaffolding.yaml", "gsm8k-rlvr-scaffolding"},
      {"gsm8k_rlvr_scaffolding_2nodes.yaml", "gsm8k-rlvr-scaffolding"}};
  for (const auto& [file, experiment] : runs) {
    INFO(file);
    const fs::path fileroot = root / file;
    // The scaffolding files give their shape as allocation_mode (generation + training
    // ranks): on 2 ranks, 1 + 1 (asynchronous), in place of the small run's colocated backends.
    std::vector<Override> small = kSmallRun;
    if (file.starts_with("gsm8k_rlvr_scaffolding")) {
      std::erase_if(small, [](const Override& o) { return o.key.ends_with(".backend"); });
      small.push_back({"allocation_mode", "sglang:d1+d1"});
    }
    Result r = run(mpirun_cmd() + " -np 2 " + train_bin() + " --config " + kFixtures + file + command_line(small) +
                   " cluster.fileroot=" + fileroot.string());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    int steps = 0;
    for (const auto& row : read_jsonl(fileroot / experiment / "trial0" / "stats.jsonl")) steps += row.contains("loss");
    CHECK(steps == 2);
  }
  fs::remove_all(root);
}

TEST_CASE("configs: each algorithm's GSM8K config in configs/ loads and means its algorithm", "[config][areal]") {
  const fs::path previous = fs::current_path();
  fs::current_path(source_dir());
  auto load = [](const std::string& name) {
    INFO(name);
    // The model is a cluster path; the test model stands in for it.
    Config cfg = load_config("configs/qwen2.5-0.5b-gsm8k-" + name + ".yaml",
                             {{"model_path", "tests/fixtures/models/tiny_chat"}});
    CHECK_NOTHROW(validate_config(cfg));
    CHECK(cfg.experiment_name == "gsm8k-" + name);
    CHECK(cfg.gconfig.n_samples == 4);
    return cfg;
  };
  const Config grpo = load("grpo"), drgrpo = load("drgrpo"), gspo = load("gspo"), dapo = load("dapo"),
               rloo = load("rloo"), liteppo = load("liteppo"), reinforce = load("reinforce-pp"),
               lora = load("grpo-lora"), multi_turn = load("grpo-multi-turn"), calculator = load("calculator");
  fs::current_path(previous);
  // Episodes: AReaL's multi-turn math with its script's discount; the calculator tool.
  CHECK(multi_turn.env == "builtin:multi_turn_math");
  CHECK(multi_turn.agent_run_args.max_turns == 2);
  CHECK(multi_turn.agent_run_args.turn_discount == Approx(0.9));
  CHECK(calculator.env == "builtin:calculator");
  CHECK(calculator.gconfig.stop == std::vector<std::string>{"</calc>"});
  // GRPO: group mean and std, then batch-normalized advantages, token-mean loss.
  CHECK(grpo.actor.reward_norm.mean_level == "group");
  CHECK(grpo.actor.reward_norm.std_level == "group");
  CHECK(grpo.actor.adv_norm.std_level == "batch");
  CHECK(grpo.actor.loss_agg_mode == "token-mean");
  // Dr.GRPO as the paper: no std anywhere, token sums over a constant.
  CHECK(drgrpo.actor.reward_norm.mean_level == "group");
  CHECK(drgrpo.actor.reward_norm.std_level == "none");
  CHECK(drgrpo.actor.adv_norm.mean_level == "none");
  CHECK(drgrpo.actor.adv_norm.std_level == "none");
  CHECK(drgrpo.actor.loss_agg_mode == "seq-mean-token-sum-norm");
  CHECK(gspo.actor.importance_sampling_level == "sequence");
  CHECK(dapo.actor.eps_clip_higher == Approx(0.28));
  CHECK(dapo.actor.overlong_reward_penalty);
  CHECK(dapo.actor.overlong_tokens == 256);
  CHECK(dapo.actor.dynamic_sampling);
  CHECK(rloo.actor.reward_norm.mean_leave1out);
  CHECK(rloo.actor.reward_norm.std_level == "none");
  CHECK(liteppo.actor.reward_norm.std_level == "batch");
  CHECK(reinforce.actor.reward_norm.mean_level == "none");
  CHECK(reinforce.actor.kl_ctl == Approx(0.001));
  CHECK(lora.actor.use_lora);
  CHECK(lora.actor.lora_rank == 16);
  CHECK(lora.optimizer.lr == Approx(1.7e-4));
  // Every config in configs/ of this family is one of the above.
  int family = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(source_dir()) / "configs"))
    family += entry.path().filename().string().rfind("qwen2.5-0.5b-gsm8k-", 0) == 0;
  CHECK(family == 10);
}

// What areal-train does not have is refused by name, never run as something else.
TEST_CASE("AReaL configs: PPO with a critic, SAPO, M2PO, Megatron and Archon examples are refused saying so", "[config][areal]") {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"gsm8k_ppo.yaml", "has no critic"},
      {"gsm8k_ppo_megatron.yaml", "has no critic"},
      {"gsm8k_sapo.yaml", "SAPO is not built"},
      {"gsm8k_m2po.yaml", "M2PO is not built"},
      {"gsm8k_grpo_megatron.yaml", "names the engine 'megatron'"},
      {"gsm8k_grpo_megatron_fp8.yaml", "Megatron engine is not built"},
      {"gsm8k_grpo_megatron_lora.yaml", "AReaL removed behave_imp_weight_cap"},
      {"gsm8k_grpo_megatron_lora_moe.yaml", "AReaL removed behave_imp_weight_cap"},
      {"gsm8k_sft_archon_fp8.yaml", "Archon engine is not built"},
      {"gsm8k_grpo_distill.yaml", "'teacher': distillation from a teacher model"},
      {"gsm8k_grpo_prox_approx.yaml", "'actor.prox_logp_method' = loglinear: the log-linear approximation"},
      {"tir_math_config.yaml", "'tir': AReaL's tool-integrated-reasoning workflow"}};
  for (const auto& [file, why] : refused) {
    INFO(file);
    std::string error;
    try {
      load_example(file, {{"actor.path", "tests/fixtures/models/tiny_chat"}});
    } catch (const ConfigError& e) {
      error = e.what();
    }
    CHECK_THAT(error, Contains(why));
  }
  CHECK_THROWS_WITH(load_config_text("actor:\n  use_sapo_loss: true\n  sapo_tau_pos: 1.0\n", "sapo.yaml", {}),
                    Contains("sapo.yaml") && Contains("SAPO is not built"));
  CHECK_THROWS_WITH(load_config_text("", "empty.yaml", {{"critic.path", "/m"}}),
                    Contains("command line") && Contains("has no critic"));
  // Off is fine: AReaL writes these in configs that use none of them.
  const Config off = load_config_text("critic: null\nactor:\n  use_sapo_loss: false\n  m2_threshold: null\n",
                                      "off.yaml", {});
  CHECK(ignored(off, "critic"));
  CHECK(ignored(off, "actor.use_sapo_loss"));
  // The proximal log-probabilities: recomputed here, so `recompute` and `metrics` (the
  // same training) are accepted, on the command line as in a file; `loglinear` is not.
  CHECK(ignored(load_config_text("", "x.yaml", {{"actor.prox_logp_method", "recompute"}}), "actor.prox_logp_method"));
  CHECK_THROWS_WITH(load_config_text("", "x.yaml", {{"actor.prox_logp_method", "loglinear"}}),
                    Contains("command line: 'actor.prox_logp_method' = loglinear: the log-linear approximation"));
}

TEST_CASE("AReaL configs: docs/configuration.md lists every refused key", "[config][areal][docs]") {
  const std::string docs = text_of(source_path("docs/configuration.md"));
  for (const RefusedKey& k : refused_areal_keys()) {
    INFO(k.pattern);
    CHECK_THAT(docs, Contains("`" + k.pattern + "`"));
  }
}

// AReaL's SFT example: the engine's name alone as its backend, an `sft` dataset. It
// loads with its AReaL meaning and trains two steps on the test model.
TEST_CASE("AReaL configs: the GSM8K SFT example loads with its AReaL meaning and trains", "[config][areal][binary][mpi]") {
  const std::vector<Override> small = {{"job", "sft"},
                                       {"actor.path", "tests/fixtures/models/tiny_chat"},
                                       {"actor.dtype", "float32"},
                                       {"actor.backend", "fsdp:d2"},
                                       {"total_train_steps", "2"},
                                       {"train_dataset.batch_size", "4"},
                                       {"valid_dataset.batch_size", "2"},
                                       {"train_dataset.path", "tests/fixtures/datasets/gsm8k"},
                                       {"valid_dataset.path", "tests/fixtures/datasets/gsm8k"}};
  const Config sft = load_example("gsm8k_sft.yaml", small);
  CHECK(sft.job == "sft");
  CHECK(sft.model_path == "tests/fixtures/models/tiny_chat");
  CHECK(sft.tokenizer_path == "tests/fixtures/models/tiny_chat");  // ${actor.path}
  CHECK(sft.actor.mb_spec.max_tokens_per_mb == 4096);
  CHECK(sft.actor.gradient_checkpointing);
  CHECK(sft.optimizer.beta2 == Approx(0.95));
  CHECK(sft.optimizer.eps == Approx(1e-5));
  CHECK(sft.optimizer.lr_scheduler_type == "cosine");
  CHECK(sft.train_dataset.type == "sft");
  // AReaL's older SFT spelling, `model:` for `actor:`, still loads; both at once are refused.
  CHECK(load_config_text("model:\n  dtype: float32\n", "model.yaml", {}).actor.dtype == "float32");
  CHECK_THROWS_WITH(load_config_text("model:\n  dtype: float32\nactor:\n  dtype: bfloat16\n", "both.yaml", {}),
                    Contains("set twice"));

  const fs::path root = fs::temp_directory_path() / ("areal_sft_example_" + std::to_string(::getpid()));
  fs::remove_all(root);
  Result r = run(mpirun_cmd() + " -np 2 " + train_bin() + " --config " + kFixtures + "gsm8k_sft.yaml" +
                 command_line(small) + " cluster.fileroot=" + root.string());
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  int steps = 0, evaluations = 0;
  for (const auto& row : read_jsonl(root / "gsm8k-sft" / "trial0" / "stats.jsonl")) {
    steps += row.contains("loss");
    evaluations += row.contains("eval_loss") && row["eval_loss"].get<double>() > 0;
  }
  CHECK(steps == 2);
  CHECK(evaluations == 2);  // its valid_dataset, before and after training
  fs::remove_all(root);
}
