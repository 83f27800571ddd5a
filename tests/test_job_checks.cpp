// Every check that the config, the world size and the model's config.json decide runs
// right after bootstrap, before the staged init: a typo in a 70 B run costs a second,
// not minutes of loading. Each case must exit 2, name what is wrong, and never reach
// the init's first log line ("staged init:").
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "run_binary.h"
#include "test_paths.h"

using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

struct BadCase {
  const char* what;
  std::string args;
  std::string message;
};

}  // namespace

TEST_CASE("job checks: config errors exit 2 before the staged init starts", "[binary][mpi][checks][slow]") {
  const fs::path root = fs::temp_directory_path() / ("areal_checks_" + std::to_string(::getpid()));
  fs::create_directories(root);
  const fs::path two_rows = root / "two_rows.jsonl";
  std::ofstream(two_rows) << R"({"question": "1+1=", "answer": "2", "text": "1+1=2"})" "\n"
                          << R"({"question": "2+2=", "answer": "4", "text": "2+2=4"})" "\n";
  const fs::path three_rows = root / "three_rows.jsonl";
  std::ofstream(three_rows) << R"({"question": "1+1=", "answer": "2"})" "\n"
                            << R"({"question": "2+2=", "answer": "4"})" "\n"
                            << R"({"question": "3+3=", "answer": "6"})" "\n";
  const std::string rl = " --config configs/ci_smoke.yaml cluster.fileroot=" + root.string() + " ";
  const std::string eval = rl + "--job eval ";
  const fs::path no_answers = root / "no_answers.jsonl";
  std::ofstream(no_answers) << R"({"question": "1+1=", "answer": "2"})" "\n" << R"({"question": "2+2=", "answer": ""})" "\n";
  // The smoke model with a config.json edit: a mixture-of-experts family not supported.
  using Edits = std::vector<std::pair<std::string, std::string>>;
  auto edited_model = [&](const std::string& name, const Edits& edits, const std::string& from = "tiny_chat") {
    const fs::path dir = root / name;
    fs::copy(source_path("tests/fixtures/models/" + from), dir);
    std::ifstream in(dir / "config.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const auto& [from, to] : edits) text.replace(text.find(from), from.size(), to);
    std::ofstream(dir / "config.json") << text;
    return dir.string();
  };
  const std::string moe = edited_model("moe", {{"\"model_type\": \"qwen2\"", "\"model_type\": \"deepseek_v3\""}});
  // A model whose logits alone (a vocabulary of 2^30) cannot fit any machine's memory.
  const std::string huge_vocab = edited_model("huge_vocab", {{"\"vocab_size\": 600", "\"vocab_size\": 1073741824"}});
  // A mixture of experts whose 3 experts do not divide over groups of 2 ranks.
  const std::string three_experts = edited_model("three_experts", {{"\"num_local_experts\": 4", "\"num_local_experts\": 3"}},
                                                 "tiny_moe_chat");
  // One attention head: nothing for tensor parallelism to split.
  const std::string one_head = edited_model("one_head", {{"\"num_attention_heads\": 4", "\"num_attention_heads\": 1"},
                                                         {"\"num_key_value_heads\": 2", "\"num_key_value_heads\": 1"}});
  const std::string sft = " --job sft --init_from_scratch true --train_dataset.path configs/data/arithmetic_sft.jsonl"
                          " --cluster.fileroot " + root.string() + " ";
  const std::vector<BadCase> cases = {
      {"LoRA target module", rl + "actor.use_lora=true actor.target_modules=[q_proj,qq_proj]", "qq_proj"},
      {"batch vs world size", rl + "train_dataset.batch_size=3",
       "'train_dataset.batch_size' = 3 must be a multiple of the training ranks (2)"},
      {"reward function", rl + "reward_fn=f1", "reward_fn"},
      {"eval: k < 1", eval + "gconfig.n_samples=0 actor.group_size=1", "option 'gconfig.n_samples': '0' is out of range (must be >= 1)"},
      {"eval: no dataset", eval + "valid_dataset.path=", "'valid_dataset.path' is required for job=eval"},
      {"eval: a prompt without an answer", eval + "valid_dataset.path=" + no_answers.string(),
       "row 1 of " + no_answers.string() + " has no 'answer' for reward_fn 'math'"},
      {"eval: a reward that cannot run", eval + "'reward_fn=command:no_such_reward_program --x'",
       "no_such_reward_program"},
      {"reward command not found", rl + "'reward_fn=command:no_such_reward_program --x'", "no_such_reward_program"},
      {"reward command that exits at once", rl + "'reward_fn=command:sh -c \"exit 7\"'", "exited with status 7"},
      {"tokenizer path", rl + "tokenizer_path=/no/such/tokenizer.json", "/no/such/tokenizer.json"},
      {"dataset path", rl + "train_dataset.path=/no/such/prompts.jsonl", "option 'train_dataset.path'"},
      {"valid dataset path", rl + "valid_dataset.path=/no/such/valid.jsonl", "option 'valid_dataset.path'"},
      {"chat template vs tokenizer", rl + "chat_template=llama3", "llama3"},
      {"minibatches vs answers per rank", rl + "actor.ppo_n_minibatches=64", "'actor.ppo_n_minibatches' = 64"},
      {"dataset smaller than a batch", rl + "train_dataset.path=" + two_rows.string(), "fewer than one batch of 4"},
      {"answers past max_position_embeddings", rl + "gconfig.max_new_tokens=250",
       "plus gconfig.max_new_tokens (250) is"},
      {"a huge max_new_tokens (the evaluation once hung on it)", rl + "gconfig.max_new_tokens=100000",
       "max_position_embeddings (256)"},
      {"an unsupported mixture-of-experts family (exit 2, as every config error)", rl + "model_path=" + moe,
       "model_type 'deepseek_v3' is not supported (supported: qwen2, qwen3, llama, mistral, gemma2, gemma3_text, "
       "qwen3_moe, mixtral); of the mixture-of-experts families only qwen3_moe and mixtral are supported"},
      {"a load-balancing loss on a dense model", rl + "actor.router_aux_loss_coef=0.01",
       "option 'actor.router_aux_loss_coef' = 0.01: the model (qwen2, "},
      {"routing replay on a dense model", rl + "actor.router_replay=true",
       "option 'actor.router_replay' = true: the model (qwen2, "},
      {"expert parallelism on a dense model", rl + "actor.backend=fsdp:d2e2",
       "option 'actor.backend': expert parallelism (e2) needs a mixture of experts; the model (qwen2, "},
      {"experts that do not divide over e", rl + "actor.backend=fsdp:d2e2 model_path=" + three_experts,
       "option 'actor.backend': the model's 3 experts (" + three_experts + ") do not divide over groups of 2 ranks"},
      {"training that cannot fit (checked before the init)",
       " --job sft --model_path " + huge_vocab + " --train_dataset.path configs/data/arithmetic_sft.jsonl"
       " --train_dataset.batch_size 2 --cluster.fileroot " + root.string(),
       "training needs at least "},
      {"context parallelism with dynamic sampling", rl + "actor.backend=fsdp:d1c2 actor.dynamic_sampling=true",
       "option 'actor.backend': context parallelism (c2) is not built with actor.dynamic_sampling"},
      {"context parallelism with tensor-parallel generation", rl + "actor.backend=fsdp:d1c2 rollout.backend=sglang:d1t2",
       "context parallelism (c2) in job=rl generates with every rank alone"},
      {"tensor parallelism that does not split the heads", rl + "actor.backend=fsdp:d1t2 model_path=" + one_head,
       "option 'actor.backend': tensor parallelism (t2) splits the attention heads and the MLP: the model's 1 heads"},
      {"tensor parallelism on a mixture of experts",
       rl + "actor.backend=fsdp:d1t2 model_path=" + source_path("tests/fixtures/models/tiny_moe_chat"),
       "option 'actor.backend': tensor parallelism (t2) is not built for a mixture of experts"},
      {"a training mesh that is not the world", rl + "actor.backend=fsdp:d2t2",
       "option 'actor.backend': 'fsdp:d2t2' asks for 4 training ranks (d x t x c) but the job has 2"},
      {"recover.mode resume without a recover checkpoint", rl + "recover.mode=resume",
       "'recover.mode' = resume: there is no recover checkpoint in"},
      {"separate generation ranks for job=sft", sft + "--train_dataset.batch_size 2 --rollout.backend areal:d1t1 "
                                                       "--actor.backend fsdp:d1",
       "only job=rl uses (asynchronous RL)"},
      {"consumer batch vs batch", rl + "rollout.consumer_batch_size=3",
       "'rollout.consumer_batch_size' = 3 must equal 'train_dataset.batch_size' = 4"},
      {"async: a partial last batch", rl + "rollout.backend=areal:d1t1 actor.backend=fsdp:d1 train_dataset.drop_last=false "
                                           "train_dataset.path=" + three_rows.string() + " train_dataset.batch_size=2",
       "cannot number; set it true"},
      {"async: sampled evaluation", rl + "rollout.backend=areal:d1t1 actor.backend=fsdp:d1 evaluator.n_samples=4",
       "option 'evaluator.n_samples' = 4: sampled evaluation is built for colocated RL only"},
      {"sft batch vs world size", sft + "--train_dataset.batch_size 5", "must be a multiple of the training ranks (2)"},
      {"an episode without room (gconfig.max_tokens)", rl + "agent_run_args.max_turns=2 gconfig.max_tokens=3",
       "leaves no room for an episode in 3 tokens"},
      {"env command not found", rl + "'env=command:no_such_env_program --x'", "no_such_env_program"},
      {"env name", rl + "env=builtin:chess", "option 'env' = 'builtin:chess' is not an environment"},
      {"export_style individual", rl + "export_style=individual", "individual"},
      {"sft tokenizer vs vocab", " --job sft --model_path tests/fixtures/models/qwen2_untied --fsdp.memory_efficient_load "
                                 "true --train_dataset.path " + two_rows.string() + " --train_dataset.batch_size 2 "
                                 "--cluster.fileroot " + root.string(),
       "vocab_size is 96"},
  };
  for (const BadCase& c : cases) {
    INFO(c.what);
    Result r = run("timeout 60 " + mpirun_cmd() + " -np 2 " + train_bin() + c.args);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Contains(c.message));
    CHECK_THAT(r.output, !Contains("staged init:"));
  }
  // The same command without the mistake does reach the init (the marker is real).
  Result good = run("timeout 60 " + mpirun_cmd() + " -np 2 " + train_bin() + rl +
                    "total_train_steps=1 valid_dataset.path= stats_logger.tensorboard.path=");
  INFO(good.output);
  CHECK(good.exit_code == 0);
  CHECK_THAT(good.output, Contains("staged init:"));

  // A stats.jsonl that cannot be written (a directory of that name) ends the job naming it.
  const fs::path blocked = root / "blocked";
  fs::create_directories(blocked / "ci-smoke" / "trial0" / "stats.jsonl");
  Result stats = run("timeout 60 " + mpirun_cmd() + " -np 2 " + train_bin() +
                     " --config configs/ci_smoke.yaml cluster.fileroot=" + blocked.string() +
                     " total_train_steps=1 valid_dataset.path= stats_logger.tensorboard.path=");
  INFO(stats.output);
  CHECK(stats.exit_code != 0);
  CHECK(stats.exit_code != 124);
  CHECK_THAT(stats.output, Contains("stats.jsonl: cannot write"));
  fs::remove_all(root);
}
