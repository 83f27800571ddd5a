// The option schema, YAML loading, overrides, references and validation.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "areal/config/allocation.h"
#include "areal/config/emit.h"
#include "areal/config/loader.h"
#include "areal/config/schema.h"
#include "areal/config/validate.h"
#include "areal/util/error.h"

using namespace areal;
using Catch::Matchers::Contains;

namespace {

Config from_yaml(const std::string& text, const std::vector<Override>& overrides = {}) {
  return load_config_text(text, "test.yaml", overrides);
}

// The message of the ConfigError that `fn` throws ("" when it does not throw).
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("every Config field reachable by name has a schema entry that reads it", "[config]") {
  Config cfg;
  cfg.fsdp.memory_efficient_load = true;
  cfg.optimizer.lr = 3e-6;
  cfg.actor.target_modules = {"q_proj", "v_proj"};
  cfg.gconfig.stop_token_ids = {151643, 151645};
  CHECK(find_option("fsdp.memory_efficient_load")->format(cfg) == "true");
  CHECK(find_option("optimizer.lr")->format(cfg) == "3e-06");
  CHECK(find_option("actor.target_modules")->format(cfg) == "[q_proj, v_proj]");
  CHECK(find_option("gconfig.stop_token_ids")->format(cfg) == "[151643, 151645]");
  CHECK(find_option("no.such.option") == nullptr);
}

TEST_CASE("schema names are unique, documented and grouped contiguously", "[config]") {
  std::set<std::string> names, closed_groups;
  std::string previous_group;
  for (const auto& spec : option_schema()) {
    INFO(spec.name);
    CHECK(names.insert(spec.name).second);
    CHECK(!spec.doc.empty());
    std::string group = spec.name.find('.') == std::string::npos ? "" : spec.name.substr(0, spec.name.find('.'));
    if (group != previous_group) {
      CHECK(closed_groups.count(group) == 0);  // a group never reopens: --print-config nests correctly
      closed_groups.insert(previous_group);
      previous_group = group;
    }
  }
  // The names the project promises (issue 2) exist.
  for (const char* name : {"model_path", "init_from_scratch", "allocation_mode", "seed", "experiment_name",
                           "trial_name", "total_train_steps", "total_train_epochs", "fsdp.memory_efficient_load",
                           "fsdp.reshard_after_forward", "fsdp.offload_params", "optimizer.type", "optimizer.lr",
                           "optimizer.weight_decay", "optimizer.beta1", "optimizer.beta2", "optimizer.eps",
                           "optimizer.lr_scheduler_type", "optimizer.warmup_steps_proportion",
                           "optimizer.min_lr_ratio", "optimizer.gradient_clipping", "actor.dtype",
                           "actor.grad_reduce_dtype", "actor.gradient_checkpointing", "actor.use_lora",
                           "actor.lora_rank", "actor.lora_alpha", "actor.target_modules", "actor.eps_clip",
                           "actor.kl_ctl", "actor.group_size", "actor.ppo_n_minibatches", "gconfig.n_samples",
                           "gconfig.max_new_tokens", "gconfig.temperature", "gconfig.top_p", "gconfig.top_k",
                           "gconfig.greedy", "log.level", "log.all_ranks"}) {
    INFO(name);
    CHECK(find_option(name) != nullptr);
  }
}

TEST_CASE("defaults follow AReaL where the concept is the same", "[config]") {
  Config cfg = load_config("", {});
  CHECK(cfg.fsdp.memory_efficient_load == false);
  CHECK(cfg.optimizer.lr == 2e-5);
  CHECK(cfg.optimizer.beta2 == 0.999);
  CHECK(cfg.actor.dtype == "bfloat16");
  CHECK(cfg.actor.grad_reduce_dtype == "float32");
  CHECK(cfg.actor.eps_clip == 0.2);
  CHECK(cfg.actor.ppo_n_minibatches == 4);
  CHECK(cfg.gconfig.n_samples == 1);
  CHECK(cfg.allocation_mode == "static");
  CHECK(cfg.rollout.backend.empty());
  CHECK(cfg.actor.backend.empty());
}

TEST_CASE("YAML nested maps set options, lists load from sequences", "[config]") {
  Config cfg = from_yaml(R"(
model_path: /models/qwen
fsdp:
  memory_efficient_load: true
  wrap_policy:
    transformer_layer_cls_to_wrap: []
optimizer: {lr: 1.0e-6, lr_scheduler_type: cosine}
gconfig:
  stop_token_ids: [1, 2, 3]
actor:
  adv_norm: {mean_level: group, std_level: none}
)");
  CHECK(cfg.model_path == "/models/qwen");
  CHECK(cfg.fsdp.memory_efficient_load);
  CHECK(cfg.optimizer.lr == 1e-6);
  CHECK(cfg.optimizer.lr_scheduler_type == "cosine");
  CHECK(cfg.gconfig.stop_token_ids == std::vector<int64_t>{1, 2, 3});
  CHECK(cfg.actor.adv_norm.mean_level == "group");
  CHECK(cfg.actor.adv_norm.std_level == "none");
  CHECK(cfg.optimizer.beta1 == 0.9);  // untouched: default
}

TEST_CASE("precedence: defaults < YAML < command line", "[config]") {
  std::string yaml = "optimizer: {lr: 0.001, beta1: 0.8}\nseed: 7\n";
  Config cfg = from_yaml(yaml, {{"optimizer.lr", "0.5"}, {"actor.target_modules", "[q_proj,k_proj]"}});
  CHECK(cfg.optimizer.lr == 0.5);      // CLI over YAML
  CHECK(cfg.optimizer.beta1 == 0.8);   // YAML over default
  CHECK(cfg.seed == 7);
  CHECK(cfg.optimizer.beta2 == 0.999); // default
  CHECK(cfg.actor.target_modules == std::vector<std::string>{"q_proj", "k_proj"});
  CHECK(load_config("", {{"actor.target_modules", "a, b"}}).actor.target_modules ==
        std::vector<std::string>{"a", "b"});
  CHECK(load_config("", {{"gconfig.stop_token_ids", "[]"}}).gconfig.stop_token_ids.empty());
}

TEST_CASE("print-config YAML loads back to the same config and the same text", "[config]") {
  Config cfg;
  cfg.experiment_name = "exp: with colon # and hash";
  cfg.trial_name = "";
  cfg.model_path = "/path with spaces/model";
  cfg.optimizer.lr = 3e-7;
  cfg.optimizer.eps = 1e-12;
  cfg.optimizer.weight_decay = 0.1;
  cfg.actor.reward_bias = -0.5;
  cfg.seed = 123456789012345;
  cfg.actor.target_modules = {"q_proj", "all linear"};
  cfg.gconfig.stop_token_ids = {151643};
  cfg.log.level = "debug";
  std::string text = config_to_yaml(cfg);
  Config back = from_yaml(text);
  CHECK(config_to_yaml(back) == text);
  CHECK(back.experiment_name == cfg.experiment_name);
  CHECK(back.trial_name.empty());
  CHECK(back.model_path == cfg.model_path);
  CHECK(back.optimizer.lr == cfg.optimizer.lr);  // shortest exact float text: bit-identical
  CHECK(back.optimizer.eps == cfg.optimizer.eps);
  CHECK(back.seed == cfg.seed);
  CHECK(back.actor.target_modules == cfg.actor.target_modules);
  CHECK(back.gconfig.stop_token_ids == cfg.gconfig.stop_token_ids);
  CHECK_THAT(text, Contains("fsdp:\n  memory_efficient_load: false"));
}

TEST_CASE("dotted-key references resolve against the merged config", "[config][interpolation]") {
  std::string yaml = R"(
experiment_name: grpo
trial_name: ${experiment_name}-t1
cluster:
  fileroot: /scratch/${trial_name}/out
stats_logger: {tensorboard: {path: ""}}
)";
  Config cfg = from_yaml(yaml);
  CHECK(cfg.trial_name == "grpo-t1");
  CHECK(cfg.cluster.fileroot == "/scratch/grpo-t1/out");
  // A CLI override of the referenced key flows into the referring one (OmegaConf semantics).
  CHECK(from_yaml(yaml, {{"experiment_name", "ppo"}}).cluster.fileroot == "/scratch/ppo-t1/out");
  // An option not set anywhere resolves to its default; a typed target parses the result.
  CHECK(from_yaml("experiment_name: x-${seed}\n").experiment_name == "x-1");
  CHECK(from_yaml("seed: 5\ntotal_train_steps: ${seed}\n").total_train_steps == 5);
}

TEST_CASE("reference cycles and dangling references are errors", "[config][interpolation]") {
  CHECK_THAT(error_of([] { from_yaml("experiment_name: ${trial_name}\ntrial_name: ${experiment_name}\n"); }),
             Contains("reference cycle") && Contains("experiment_name") && Contains("trial_name"));
  CHECK_THAT(error_of([] { from_yaml("experiment_name: ${experiment_name}\n"); }), Contains("reference cycle"));
  CHECK_THAT(error_of([] { from_yaml("experiment_name: ${optimizer.lrr}\n"); }),
             Contains("not an option") && Contains("did you mean 'optimizer.lr'"));
  CHECK_THAT(error_of([] { from_yaml("experiment_name: ${seed\n"); }), Contains("unterminated reference"));
  CHECK_THAT(error_of([] { from_yaml("experiment_name: ${actor.target_modules}\n"); }), Contains("is a list"));
}

TEST_CASE("bad YAML input is reported with file, line and column", "[config][errors]") {
  SECTION("unknown key, with the closest valid name") {
    std::string e = error_of([] { from_yaml("seed: 1\nfsdp:\n  memory_efficent_load: true\n"); });
    CHECK_THAT(e, Contains("test.yaml:3:3") && Contains("'fsdp.memory_efficent_load' is not an option") &&
                      Contains("did you mean 'fsdp.memory_efficient_load'"));
  }
  SECTION("unknown group") {
    CHECK_THAT(error_of([] { from_yaml("fsdpp:\n  memory_efficient_load: true\n"); }),
               Contains("test.yaml:1:1") && Contains("unknown group 'fsdpp'"));
  }
  SECTION("a leaf name without its group") {
    CHECK_THAT(error_of([] { from_yaml("memory_efficient_load: true\n"); }),
               Contains("did you mean 'fsdp.memory_efficient_load'"));
  }
  SECTION("the same option twice in one file, whether written nested or dotted") {
    CHECK_THAT(error_of([] { from_yaml("seed: 1\noptimizer:\n  lr: 0.1\nseed: 2\n"); }),
               Contains("test.yaml:4:1") && Contains("option 'seed' is set twice in this file") &&
                   Contains("first at test.yaml:1:7"));
    CHECK_THAT(error_of([] { from_yaml("fsdp:\n  memory_efficient_load: true\nfsdp.memory_efficient_load: false\n"); }),
               Contains("test.yaml:3:1") && Contains("'fsdp.memory_efficient_load' is set twice"));
  }
  SECTION("malformed YAML") {
    std::string e = error_of([] { from_yaml("seed: 1\noptimizer: {lr: 0.1\n"); });
    CHECK_THAT(e, Contains("test.yaml:") && Contains("malformed YAML"));
  }
  SECTION("wrong type, out of range, bad enum") {
    CHECK_THAT(error_of([] { from_yaml("optimizer:\n  lr: fast\n"); }),
               Contains("test.yaml:2:7") && Contains("'optimizer.lr'") && Contains("'fast' is not a number"));
    CHECK_THAT(error_of([] { from_yaml("optimizer: {lr: -1}\n"); }),
               Contains("'-1' is out of range (must be >= 0)"));
    CHECK_THAT(error_of([] { from_yaml("actor: {dtype: fp8}\n"); }),
               Contains("'fp8' is not allowed (one of bfloat16, float16, float32)"));
    CHECK_THAT(error_of([] { from_yaml("init_from_scratch: maybe\n"); }), Contains("is not a boolean"));
    CHECK_THAT(error_of([] { from_yaml("seed: 1.5\n"); }), Contains("'1.5' is not an integer"));
    CHECK_THAT(error_of([] { from_yaml("optimizer: {eps: 0}\n"); }), Contains("must be > 0"));
    CHECK_THAT(error_of([] { from_yaml("optimizer: {lr: .nan}\n"); }), Contains("not a number"));
  }
  SECTION("structure errors") {
    CHECK_THAT(error_of([] { from_yaml("seed: [1, 2]\n"); }), Contains("takes one int value, not a list"));
    CHECK_THAT(error_of([] { from_yaml("seed: {a: 1}\n"); }), Contains("not a map"));
    CHECK_THAT(error_of([] { from_yaml("fsdp: true\n"); }), Contains("is a group of options"));
    CHECK_THAT(error_of([] { from_yaml("seed:\n"); }), Contains("'seed' has no value"));
    CHECK_THAT(error_of([] { from_yaml("- 1\n- 2\n"); }), Contains("top level must be a map"));
  }
  SECTION("missing config file") {
    CHECK_THAT(error_of([] { load_config("/no/such/run.yaml", {}); }),
               Contains("/no/such/run.yaml") && Contains("no such file"));
  }
}

TEST_CASE("unknown override keys get a suggestion", "[config][errors]") {
  CHECK_THAT(error_of([] { load_config("", {{"optimizer.lrate", "1"}}); }),
             Contains("'optimizer.lrate' is not an option") && Contains("did you mean 'optimizer.lr'"));
  CHECK_THAT(error_of([] { load_config("", {{"fsdp", "1"}}); }), Contains("is a group, not an option"));
}

TEST_CASE("validation refuses contradictory or impossible configs", "[config][validate]") {
  Config cfg;
  cfg.init_from_scratch = true;
  CHECK_NOTHROW(validate_config(cfg));

  SECTION("memory_efficient_load with init_from_scratch names both options") {
    cfg.fsdp.memory_efficient_load = true;
    CHECK_THAT(error_of([&] { validate_config(cfg); }),
               Contains("fsdp.memory_efficient_load") && Contains("init_from_scratch") && Contains("nothing"));
  }
  SECTION("model_path is required and must exist unless starting from scratch") {
    cfg.init_from_scratch = false;
    CHECK_THAT(error_of([&] { validate_config(cfg); }), Contains("'model_path' is required"));
    cfg.model_path = "/definitely/not/here";
    CHECK_THAT(error_of([&] { validate_config(cfg); }), Contains("'/definitely/not/here' does not exist"));
    cfg.model_path = std::filesystem::temp_directory_path().string();
    CHECK_NOTHROW(validate_config(cfg));
  }
  SECTION("options of features that do not exist yet are refused when changed") {
    cfg.fsdp.offload_params = true;
    CHECK_THAT(error_of([&] { validate_config(cfg); }),
               Contains("'fsdp.offload_params'") && Contains("not implemented yet"));
    cfg.fsdp.offload_params = false;
    cfg.fsdp.reshard_after_forward = false;
    CHECK_THAT(error_of([&] { validate_config(cfg); }),
               Contains("'fsdp.reshard_after_forward'") && Contains("keeping gathered units"));
  }
  SECTION("dual clip must exceed 1") {
    cfg.actor.c_clip = 0.5;
    CHECK_THAT(error_of([&] { validate_config(cfg); }), Contains("actor.c_clip") && Contains("must be > 1"));
    cfg.actor.c_clip = 3.0;
    CHECK_NOTHROW(validate_config(cfg));
  }
  SECTION("job=rl needs prompts, and groups of n_samples answers") {
    cfg.job = "rl";
    CHECK_THAT(error_of([&] { validate_config(cfg); }), Contains("'train_dataset.path' is required for job=rl"));
    cfg.train_dataset.path = "builtin:arithmetic/train";
    cfg.gconfig.n_samples = 4;
    CHECK_NOTHROW(validate_config(cfg));  // batch-level advantages: no groups needed (as AReaL)
    cfg.actor.adv_norm.mean_level = "group";
    CHECK_THAT(error_of([&] { validate_config(cfg); }),
               Contains("'actor.group_size' = 1 must equal 'gconfig.n_samples' = 4"));
    cfg.actor.group_size = 4;
    CHECK_NOTHROW(validate_config(cfg));
    cfg.gconfig.max_new_tokens = 4;
    cfg.gconfig.min_new_tokens = 5;
    CHECK_THAT(error_of([&] { validate_config(cfg); }), Contains("'gconfig.min_new_tokens' = 5"));
    cfg.gconfig.min_new_tokens = 0;
    cfg.gconfig.stop = {"</calc>", ""};
    CHECK_THAT(error_of([&] { validate_config(cfg); }), Contains("'gconfig.stop': an empty stop string"));
  }
  SECTION("sampled evaluation (evaluator.n_samples) is job=rl's; job=sft is refused") {
    cfg.job = "sft";
    cfg.evaluator.n_samples = 4;
    CHECK_THAT(error_of([&] { validate_config(cfg); }),
               Contains("option 'evaluator.n_samples' = 4 samples answers in job=rl") && Contains("--job eval"));
  }
}

TEST_CASE("gconfig.stop: stop strings from YAML and the command line, null as none", "[config]") {
  CHECK(from_yaml("gconfig:\n  stop: [\"</calc>\", \"\\n\\n\"]\n").gconfig.stop ==
        std::vector<std::string>{"</calc>", "\n\n"});
  CHECK(from_yaml("gconfig:\n  stop: null\n").gconfig.stop.empty());  // AReaL's default
  CHECK(load_config("", {{"gconfig.stop", "[</calc>]"}}).gconfig.stop == std::vector<std::string>{"</calc>"});
  CHECK(Config{}.gconfig.stop.empty());
}

TEST_CASE("backends: rollout.backend, actor.backend and the deprecated allocation_mode", "[config][allocation]") {
  auto shapes = [](const std::string& rollout, const std::string& actor, const std::string& mode, int world) {
    Config cfg;
    cfg.rollout.backend = rollout;
    cfg.actor.backend = actor;
    cfg.allocation_mode = mode;
    Allocation a = parse_allocation(cfg);
    check_allocation_against_world(a, world);
    return a;
  };
  // Defaults: every rank trains and generates alone.
  Allocation plain = shapes("", "", "static", 3);
  CHECK((plain.actor.data == 3 && plain.rollout.data == 3 && plain.tensor_parallel() == 1));
  // AReaL's spellings: sglang/vllm mean the built-in engine of that shape; p1 and c1 are no parallelism.
  for (const char* rollout : {"areal:d1t2", "sglang:d1t2", "vllm:d1p1t2", "t2d1"}) {
    Allocation a = shapes(rollout, "fsdp:d2", "static", 2);
    CHECK((a.rollout.data == 1 && a.tensor_parallel() == 2 && a.actor.data == 2));
  }
  CHECK(shapes("sglang:d2t2", "", "static", 4).tensor_parallel() == 2);
  CHECK_THAT(describe_allocation(shapes("sglang:d2t2", "", "static", 4)),
             Contains("2 replicas x 2 tensor-parallel ranks") && Contains("shape of sglang") && Contains("FSDP over 4"));
  // allocation_mode maps onto the two backends.
  Allocation old = shapes("", "", "sglang:d1t4+fsdp:d4", 4);
  CHECK((old.rollout.engine == "sglang" && old.tensor_parallel() == 4 && old.actor.data == 4));
  CHECK(shapes("", "", "d2", 2).actor.data == 2);
  CHECK(shapes("", "", "fsdp:d2", 2).actor.data == 2);
  // Refusals name the option and say why.
  CHECK_THAT(error_of([&] { shapes("sglang:d2t2", "", "sglang:d1t4+fsdp:d4", 4); }), Contains("disagrees"));
  CHECK_THAT(error_of([&] { shapes("", "fsdp:d2p2", "static", 2); }), Contains("'actor.backend'") && Contains("pipeline"));
  // Training's t and c: d x t x c ranks; t with e is refused.
  Allocation mesh = shapes("", "fsdp:d1t2c2", "static", 4);
  CHECK((mesh.actor.tensor == 2 && mesh.actor.context == 2 && mesh.actor.sharing() == 4 && mesh.actor.ranks() == 4));
  CHECK_THAT(describe_allocation(mesh), Contains("1 data-parallel groups of 4: 2 tensor-parallel ranks x every "
                                                 "sequence over 2 ranks"));
  CHECK_THAT(error_of([&] { shapes("", "fsdp:d2t2e2", "static", 4); }), Contains("tensor and expert parallelism"));
  CHECK_THAT(error_of([&] { shapes("", "fsdp:d2t2", "static", 2); }),
             Contains("'fsdp:d2t2' asks for 4 training ranks (d x t x c) but the job has 2"));
  CHECK_THAT(error_of([&] { shapes("", "megatron", "static", 2); }), Contains("engine 'megatron'"));
  CHECK_THAT(error_of([&] { shapes("tgi:d1t2", "", "static", 2); }), Contains("'rollout.backend'") && Contains("'tgi'"));
  CHECK_THAT(error_of([&] { shapes("", "", "d0", 2); }), Contains("positive count"));
  CHECK_THAT(error_of([&] { shapes("areal:t2", "", "static", 2); }), Contains("no data-parallel size"));
  CHECK_THAT(error_of([&] { shapes("", "fsdp:d4", "static", 2); }), Contains("asks for 4") && Contains("has 2"));
  CHECK_THAT(error_of([&] { shapes("areal:d1t4", "", "static", 2); }), Contains("asks for 4 generation ranks"));
  // Shapes that add up to the world size are separate groups (asynchronous RL): the
  // first ranks generate, the others train.
  Allocation apart = shapes("", "", "sglang:d1t2+fsdp:d2", 4);
  CHECK((apart.separate && apart.generation_ranks() == 2 && apart.tensor_parallel() == 2));
  CHECK((!apart.trains(0) && !apart.trains(1) && apart.trains(2) && apart.trains(3)));
  CHECK_THAT(describe_allocation(apart), Contains("ranks 0-1 generate") && Contains("ranks 2-3 train"));
  Allocation one_one = shapes("areal:d1t1", "fsdp:d1", "static", 2);
  CHECK((one_one.separate && one_one.generation_ranks() == 1 && one_one.trains(1)));
  CHECK((!plain.separate && plain.generation_ranks() == 0 && plain.trains(0)));
  CHECK_THAT(error_of([&] { shapes("areal:d1t1", "fsdp:d2", "static", 4); }), Contains("asks for 2 training ranks"));
  // AReaL's expert-parallel dimension folds into the training ranks (fsdp:d4e2: 4 ranks,
  // experts over groups of 2); it must divide d; generation splits experts over t instead.
  CHECK(shapes("", "fsdp:d2e1", "static", 2).actor.expert == 1);
  Allocation experts = shapes("", "fsdp:d4e2", "static", 4);
  CHECK((experts.actor.data == 4 && experts.actor.expert == 2 && experts.actor.ranks() == 4));
  CHECK_THAT(describe_allocation(experts), Contains("FSDP over 4 ranks, experts over groups of 2 ranks"));
  CHECK(shapes("", "", "sglang:d1t2+fsdp:d2e2", 2).actor.expert == 2);
  CHECK_THAT(error_of([&] { shapes("", "fsdp:d4e3", "static", 4); }),
             Contains("'actor.backend'") && Contains("groups of 3 ranks") && Contains("4 data-parallel ranks"));
  // Generation: experts whole over a group's t ranks (e = t) or each split over them (e1).
  CHECK(shapes("sglang:d1t2e2", "", "static", 2).rollout.expert == 2);
  CHECK_THAT(error_of([&] { shapes("sglang:d1t4e2", "", "static", 4); }),
             Contains("'rollout.backend'") && Contains("experts over 2 of the group's 4 tensor-parallel ranks"));
  CHECK_THAT(error_of([&] { shapes("", "fsdp:d2e2", "sglang:d2+fsdp:d2e1", 2); }), Contains("disagrees"));
  // Context parallelism (training): d groups of c ranks, every sequence over a group's ranks.
  Allocation sequences = shapes("", "fsdp:d2c2", "static", 4);
  CHECK((sequences.actor.data == 2 && sequences.actor.context == 2 && sequences.actor.ranks() == 4));
  CHECK_THAT(describe_allocation(sequences), Contains("FSDP over 4 ranks (2 data-parallel groups of 2: every sequence over 2 ranks)"));
  CHECK_THAT(error_of([&] { shapes("", "fsdp:d2c2", "static", 2); }), Contains("asks for 4 training ranks"));
  CHECK_THAT(error_of([&] { shapes("sglang:d2c2", "", "static", 4); }), Contains("context-parallel generation"));
  CHECK_THAT(error_of([&] { shapes("", "fsdp:d2c2e2", "static", 4); }), Contains("context and expert parallelism"));
}

TEST_CASE("config: AReaL's NormConfig sections: null is off, a section given takes AReaL's defaults",
          "[config]") {
  // reward_norm defaults to off (AReaL's null); a section with only a mean level takes
  // AReaL's default std level (batch); `null` turns adv_norm off; `mean_level: null` is none.
  Config off = load_config_text("job: init\n", "areal.yaml", {});
  CHECK(off.actor.reward_norm.mean_level == "none");
  CHECK(off.actor.reward_norm.std_level == "none");
  Config cfg = load_config_text(R"(
actor:
  reward_norm:
    mean_level: group
    group_size: 4
  adv_norm: null
)",
                                "areal.yaml", {});
  CHECK(cfg.actor.reward_norm.mean_level == "group");
  CHECK(cfg.actor.reward_norm.std_level == "batch");
  CHECK(cfg.actor.reward_norm.group_size == 4);
  CHECK(cfg.actor.adv_norm.mean_level == "none");
  CHECK(cfg.actor.adv_norm.std_level == "none");
  Config levels = load_config_text("actor:\n  adv_norm:\n    mean_level: null\n    std_level: group\n", "areal.yaml", {});
  CHECK(levels.actor.adv_norm.mean_level == "none");
  CHECK(levels.actor.adv_norm.std_level == "group");
  // A group level needs groups of the answers to one prompt.
  cfg.job = "rl";
  cfg.init_from_scratch = true;
  cfg.train_dataset.path = "builtin:arithmetic/train";
  CHECK_THROWS_WITH(validate_config(cfg), Catch::Matchers::Contains("actor.reward_norm.group_size") &&
                                              Catch::Matchers::Contains("gconfig.n_samples"));
  cfg.gconfig.n_samples = cfg.actor.group_size = 4;
  CHECK_NOTHROW(validate_config(cfg));
}

TEST_CASE("config: AReaL's rejection_sampling section, its checks, and the older behav_imp_weight_cap", "[config]") {
  // As AReaL's example configs write it: the section's level defaults to token, lower to none.
  Config cfg = from_yaml("job: rl\ninit_from_scratch: true\ntrain_dataset: {path: builtin:arithmetic/train}\n"
                         "actor:\n  use_decoupled_loss: true\n  rejection_sampling:\n    metric: ratio\n"
                         "    upper: 5.0\n  mb_spec: {packing_algorithm: ffd}\n");
  CHECK(cfg.actor.rejection_sampling.level == "token");
  CHECK(cfg.actor.rejection_sampling.action == "mask");
  CHECK(cfg.actor.rejection_sampling.upper == 5.0);
  CHECK(std::isinf(cfg.actor.rejection_sampling.lower));
  CHECK_NOTHROW(validate_config(cfg));
  CHECK(config_warnings(cfg).empty());
  // null is off; the CLI spells the same
  CHECK(from_yaml("actor: {rejection_sampling: null}\n").actor.rejection_sampling.level == "none");
  CHECK(from_yaml("", {{"actor.rejection_sampling.level", "sequence"}}).actor.rejection_sampling.level == "sequence");
  CHECK(from_yaml("actor: {rejection_sampling: {lower: null}}\n").actor.rejection_sampling.lower < -1e300);
  CHECK(from_yaml("actor: {rejection_sampling: {lower: -.inf}}\n").actor.rejection_sampling.lower < -1e300);
  CHECK_THAT(error_of([] { from_yaml("actor: {rejection_sampling: {upper: .inf}}\n"); }),
             Contains("actor.rejection_sampling.upper") && Contains("finite"));
  // AReaL's __post_init__ rules, by option name.
  auto refused = [&](const std::string& key, const std::string& value) {
    Config c = cfg;
    c.actor.rejection_sampling.level = "token";
    if (key == "upper") c.actor.rejection_sampling.upper = std::stod(value);
    if (key == "lower") c.actor.rejection_sampling.lower = std::stod(value);
    if (key == "clamp-kl") c.actor.rejection_sampling.action = "clamp", c.actor.rejection_sampling.metric = value;
    if (key == "cap") c.actor.behav_imp_weight_cap = std::stod(value);
    return error_of([&] { validate_config(c); });
  };
  CHECK_THAT(refused("upper", "1.0"), Contains("'actor.rejection_sampling.upper' = 1") && Contains("> 1"));
  CHECK_THAT(refused("lower", "-0.5"), Contains("actor.rejection_sampling.lower") && Contains("> 0"));
  CHECK_THAT(refused("lower", "6"), Contains("greater than 'actor.rejection_sampling.upper'"));
  CHECK_THAT(refused("clamp-kl", "kl_k3"), Contains("needs metric ratio"));
  CHECK_THAT(refused("cap", "3"), Contains("behav_imp_weight_cap") && Contains("both"));
  // mb_spec.packing_algorithm: ffd is what is built; AReaL's kk is refused by name.
  CHECK_THAT(error_of([] { validate_config(from_yaml("init_from_scratch: true\nactor: {mb_spec: {packing_algorithm: kk}}\n")); }),
             Contains("'actor.mb_spec.packing_algorithm' = 'kk'") && Contains("Karmarkar-Karp"));
  // The older spelling alone is fine; either without the decoupled loss is AReaL's warning.
  Config old = cfg;
  old.actor.rejection_sampling.level = "none";
  old.actor.behav_imp_weight_cap = 5;
  CHECK_NOTHROW(validate_config(old));
  old.actor.use_decoupled_loss = false;
  REQUIRE(config_warnings(old).size() == 1);
  CHECK_THAT(config_warnings(old)[0], Contains("ignored"));
  Config unfiltered = cfg;
  unfiltered.actor.rejection_sampling.level = "none";
  REQUIRE(config_warnings(unfiltered).size() == 1);
  CHECK_THAT(config_warnings(unfiltered)[0], Contains("neither filtered nor weighted"));
}
