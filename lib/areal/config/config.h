// The typed configuration of one areal-train run.
//
// Field names are the option names: `cfg.fsdp.memory_efficient_load` is the option
// `fsdp.memory_efficient_load`. The in-class initializers ARE the defaults; the schema
// (schema.cpp) adds the doc line and the allowed values for each field, and everything
// else (YAML, CLI flags, --help, --print-config, docs/cli_reference.md) is derived
// from those two. Library code and tests build a Config directly:
//
//   areal::Config cfg;                      // all defaults
//   cfg.fsdp.memory_efficient_load = true;
//
// Names and defaults follow AReaL's cli_args.py where the concept is the same.
// "0" stands for AReaL's `None` in optional numeric options (documented per option).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace areal {

struct FsdpWrapPolicy {
  // Empty: one unit per decoder layer of the model (the only policy so far).
  std::vector<std::string> transformer_layer_cls_to_wrap;
};

struct FsdpConfig {
  bool memory_efficient_load = false;
  bool reshard_after_forward = true;
  bool offload_params = false;
  int64_t prefetch_depth = 1;  // units gathered ahead of the one computing; 0: no overlap
  FsdpWrapPolicy wrap_policy;
};

struct OptimizerConfig {
  std::string type = "adam";
  double lr = 2e-5;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  std::string lr_scheduler_type = "constant";
  double warmup_steps_proportion = 0.001;
  double min_lr_ratio = 0.0;
  double gradient_clipping = 1.0;
};

// AReaL's NormConfig. A section given in YAML takes AReaL's defaults (batch, batch);
// `null` turns it off (both levels none).
struct NormConfig {
  std::string mean_level = "batch";
  bool mean_leave1out = false;
  std::string std_level = "batch";
  bool std_unbiased = true;
  double eps = 1e-5;
  int64_t group_size = 1;  // reward_norm's groups (= gconfig.n_samples for a group level)
};

// AReaL's MicroBatchSpec: the token budget and how sequences are packed under it.
struct MicroBatchSpec {
  int64_t max_tokens_per_mb = 0;  // 0: one micro-batch per minibatch, padded
  std::string packing_algorithm = "ffd";  // first fit decreasing, the one packing built in
};

// AReaL's RejectionSamplingConfig: decoupled PPO's filter of stale tokens by the
// divergence of the proximal policy from the behaviour policy. level `none` is AReaL's
// `rejection_sampling: null` (no filter and no behaviour weight); a section given in
// YAML takes AReaL's defaults (token, mask, ratio, mean, upper 5).
struct RejectionSamplingConfig {
  std::string level = "none";    // none, token, sequence
  std::string action = "mask";   // mask: out of the loss; clamp: weight clamped to [lower, upper]
  std::string metric = "ratio";  // ratio, kl_k1, kl_k2, kl_k3
  std::string agg = "mean";      // sequence level: sum, mean, max
  double upper = 5.0;
  double lower = -std::numeric_limits<double>::infinity();  // AReaL's None: no lower bound
};

struct ActorConfig {
  std::string backend;  // AReaL's `fsdp:dN`; empty: every rank trains
  std::string dtype = "bfloat16";
  std::string grad_reduce_dtype = "float32";
  bool gradient_checkpointing = false;  // AReaL's default: keep activations
  // A mixture of experts' load-balancing loss weight; -1: the model's config.json decides
  double router_aux_loss_coef = -1;
  // A mixture of experts in RL: route each token as the rollout did (routing replay)
  bool router_replay = false;
  MicroBatchSpec mb_spec;
  bool share_prompts = true;  // packed micro-batches hold a group's prompt once (areal-train's own)
  bool use_lora = false;
  int64_t lora_rank = 32;
  int64_t lora_alpha = 16;
  std::vector<std::string> target_modules = {"all-linear"};
  std::string lora_adapter_path;  // a PEFT adapter directory to start from; empty: fresh adapters
  int64_t group_size = 1;
  int64_t ppo_n_minibatches = 4;
  double eps_clip = 0.2;
  double eps_clip_higher = 0.0;  // 0: symmetric clipping
  double c_clip = 0.0;           // 0: no dual clip
  double temperature = 1.0;
  double reward_scaling = 1.0;
  double reward_bias = 0.0;
  double reward_clip = 20.0;
  // AReaL's default is null: no reward normalization.
  NormConfig reward_norm = {.mean_level = "none", .std_level = "none"};
  NormConfig adv_norm;
  double kl_ctl = 0.1;
  std::string kl_estimator = "k1";
  double discount = 1.0;
  double gae_lambda = 1.0;
  bool recompute_logprob = false;
  bool use_decoupled_loss = false;
  RejectionSamplingConfig rejection_sampling;
  double behav_imp_weight_cap = 0.0;  // AReaL's older spelling of a token-level ratio mask; 0: unset
  std::string importance_sampling_level = "token";  // token, or sequence (GSPO)
  bool overlong_reward_penalty = false;             // DAPO's soft penalty on answers near the limit
  int64_t overlong_tokens = 0;
  double overlong_penalty_factor = 0.0;
  bool mask_no_eos_with_zero = false;  // truncated answers (no stop token) leave the loss
  bool dynamic_sampling = false;       // DAPO: groups whose rewards are all equal leave the batch
  // How token losses make the minibatch loss: token-mean, seq-mean-token-sum,
  // seq-mean-token-mean, seq-mean-token-sum-norm (Dr.GRPO's constant divisor).
  std::string loss_agg_mode = "token-mean";
};

// AReaL's InferenceEngineConfig; only the generation shape so far.
struct RolloutConfig {
  std::string backend;  // `areal:dDtT` (or AReaL's sglang:/vllm: spelling); empty: t = 1 on every rank
  int64_t max_running_requests = 0;  // answers a generation group decodes at once; 0: all of the step's
  // Asynchronous RL (separate generation ranks), AReaL's names; in groups (prompts).
  int64_t max_concurrent_rollouts = 0;  // groups generated at once over all replicas; 0: consumer_batch_size
  int64_t queue_size = 0;               // finished groups waiting for the trainer, at most; 0: no bound but eta's
  int64_t consumer_batch_size = 0;      // groups per training step; 0: train_dataset.batch_size
  int64_t max_head_offpolicyness = 0;   // eta: versions a trained sample may lag; 0: synchronous
};

struct GenerationConfig {
  int64_t n_samples = 1;
  int64_t max_new_tokens = 16384;
  int64_t min_new_tokens = 0;
  int64_t max_tokens = 32768;  // prompt + answer (an episode: every turn), at most
  bool greedy = false;
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 100000000;
  std::vector<int64_t> stop_token_ids;
  std::vector<std::string> stop;  // stop strings: matched on the decoded answer, kept in it
};

struct DatasetConfig {
  std::string path;
  std::string split;  // of a dataset folder; empty: train for train_dataset, test for valid_dataset
  std::string type = "rl";
  std::string prompt_key = "prompt";
  std::string answer_key = "answer";
  int64_t batch_size = 1;
  bool shuffle = true;
  bool drop_last = true;
  int64_t max_length = 0;  // 0: no limit
};

struct EvaluatorConfig {
  int64_t freq_epochs = 0;  // 0: none; evaluations come before the first and after the last step
  int64_t freq_steps = 0;
  int64_t freq_secs = 0;
  int64_t n_samples = 0;  // areal-train's: sampled answers per prompt for pass@k / maj@k (0: greedy only)
};

struct SaverConfig {
  bool merge_lora = false;
  int64_t freq_epochs = 0;  // 0: never
  int64_t freq_steps = 0;
  int64_t freq_secs = 0;
  int64_t keep_last = 0;    // periodic saves kept (0: all)
};

struct RecoverConfig {
  std::string mode = "disabled";  // disabled/off, auto/on, resume
  int64_t freq_epochs = 0;        // 0: never
  int64_t freq_steps = 0;
  int64_t freq_secs = 3600;
  int64_t retries = 3;
  bool no_save_optim = false;
  bool no_load_optim = false;
};

struct TensorBoardConfig {
  std::string path;  // empty: no TensorBoard output
};

struct StatsLoggerConfig {
  TensorBoardConfig tensorboard;
};

struct ClusterConfig {
  std::string fileroot = "/tmp/areal";
  double collective_timeout = 1800;  // seconds a collective may wait before the job ends
};

struct LogConfig {
  std::string level = "info";
  bool all_ranks = false;
};

// Multi-turn episodes (docs/agentic.md), under AReaL's multi-turn example's names.
struct AgentRunArgs {
  int64_t max_turns = 1;       // model turns per episode; 1 with no env: single answers
  double turn_discount = 1.0;  // an episode's reward times turn_discount^(turns - 1)
};

struct Config {
  std::string job = "init";
  std::string experiment_name = "areal-train";
  std::string trial_name = "trial0";
  std::string model_path;
  std::string tokenizer_path;  // empty: model_path's tokenizer.json, else the byte tokenizer
  std::string chat_template = "auto";  // auto: the model's own template when it has one, else none
  bool enable_thinking = false;         // passed to the model's template (AReaL's workflow default)
  int64_t preview_prompts = 3;          // job=preview: how many prompts to print
  std::string reward_fn = "exact_match";
  int64_t reward_workers = 2;   // processes per rank for reward_fn `command:...`
  double reward_timeout = 30;   // seconds one reward call may take
  // Episodes' environment: empty (with agent_run_args.max_turns > 1: retry until
  // reward_fn scores the answer, AReaL's multi-turn math), builtin:<name> or command:<...>.
  std::string env;
  int64_t env_workers = 2;       // processes per generation rank for env `command:...`
  double env_timeout = 30;       // seconds one environment call may take
  std::string export_style = "concat";  // an episode trains as one sequence (AReaL's concat)
  bool init_from_scratch = false;
  std::string allocation_mode = "static";
  std::string device = "auto";
  int64_t seed = 1;
  int64_t total_train_epochs = 1;
  int64_t total_train_steps = 0;  // 0: no limit beyond total_train_epochs
  // AReaL's: with actor.dynamic_sampling, true trains on the groups that stay, false
  // (AReaL's default) refills the batch with groups that carry a signal.
  bool dynamic_bs = false;

  ClusterConfig cluster;
  FsdpConfig fsdp;
  OptimizerConfig optimizer;
  ActorConfig actor;
  RolloutConfig rollout;
  GenerationConfig gconfig;
  AgentRunArgs agent_run_args;
  DatasetConfig train_dataset;
  DatasetConfig valid_dataset;
  EvaluatorConfig evaluator;
  SaverConfig saver;
  RecoverConfig recover;
  StatsLoggerConfig stats_logger;
  LogConfig log;

  // Not options: the AReaL keys of the config file that areal-train read and ignores,
  // "key: why" (areal_compat.h); main warns once.
  std::vector<std::string> ignored_keys;
};

}  // namespace areal
