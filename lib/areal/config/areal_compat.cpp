#include "areal/config/areal_compat.h"

#include <algorithm>

#include "areal/util/strings.h"

namespace areal {

const std::vector<OptionAlias>& option_aliases() {
  // AReaL nests these under the actor's engine config; areal-train has one model and
  // one optimizer, declared at the top.
  // AReaL's SFT config calls its engine `model` where the RL configs say `actor`.
  static const std::vector<OptionAlias> aliases = {
      {"actor.path", "model_path"},
      {"actor.init_from_scratch", "init_from_scratch"},
      {"actor.optimizer.", "optimizer."},
      {"actor.fsdp.", "fsdp."},
      {"model.path", "model_path"},
      {"model.init_from_scratch", "init_from_scratch"},
      {"model.optimizer.", "optimizer."},
      {"model.fsdp.", "fsdp."},
      {"model.", "actor."},
  };
  return aliases;
}

const std::vector<IgnoredKey>& ignored_areal_keys() {
  const std::string same_name = "areal-train takes it from the top level (experiment_name, trial_name, cluster.fileroot)";
  const std::string servers = "generation runs in areal-train's own engine (rollout.backend), not in an inference server";
  const std::string launch = "mpirun or srun starts the ranks; they meet through MPI";
  static const std::vector<IgnoredKey> keys = {
      {"*.experiment_name", same_name},
      {"*.trial_name", same_name},
      {"*.fileroot", same_name},
      {"enable_offload", "areal-train keeps the sharded training state in place while it generates"},
      {"actor.sapo_tau_pos", "used by SAPO only, which areal-train does not have"},
      {"actor.sapo_tau_neg", "used by SAPO only, which areal-train does not have"},
      {"sglang.", servers},
      {"vllm.", servers},
      {"launcher.", launch},
      {"scheduler.", launch},
      {"cluster.n_nodes", launch},
      {"cluster.n_gpus_per_node", launch},
      {"cluster.cluster_name", launch},
      {"cluster.name_resolve.", launch},
      {"actor.scheduling_spec", launch},
      {"rollout.scheduling_spec", launch},
      {"ref.", "the KL reference is the initial policy (actor.path, or the base model with LoRA)"},
      {"actor.disable_dropout", "the models have no dropout"},
      {"actor.attn_impl", "attention is areal-train's own"},
      {"actor.weight_update_mode", "the rollout takes the new weights straight from the FSDP shards"},
      {"actor.max_new_tokens", "gconfig.max_new_tokens decides"},
      {"actor.peft_type", "LoRA is the one adapter type (actor.use_lora)"},
      {"actor.mb_spec.n_mbs", "micro-batches follow actor.mb_spec.max_tokens_per_mb"},
      {"actor.mb_spec.granularity", "micro-batches follow actor.mb_spec.max_tokens_per_mb"},
      {"actor.mb_spec.n_mbs_divisor", "micro-batches follow actor.mb_spec.max_tokens_per_mb"},
      {"actor.pad_to_maximum", "micro-batches are packed to their own length; padding them to the budget only "
                               "costs time"},
      {"rollout.tokenizer_path", "the rollout uses tokenizer_path"},
      {"rollout.use_lora", "generation takes the adapters with the policy's weights (actor.use_lora decides)"},
      {"gconfig.lora_name", "generation takes the adapters with the policy's weights (actor.use_lora decides)"},
      {"rollout.dump_to_file", "answers are not dumped; stats.jsonl has each step's figures"},
      {"rollout.return_routed_experts",
       "the rollout records a mixture of experts' routing itself (moe_route_agreement; actor.router_replay)"},
      {"rollout.enable_rollout_tracing", "no request tracing (no requests: generation is in-process)"},
      {"rollout.check_trajectory_format", "no custom workflows"},
      {"rollout.setup_timeout", "no servers to wait for"},
      {"rollout.request_timeout", "no requests: generation is in-process"},
      {"rollout.request_retries", "no requests: generation is in-process"},
      {"rollout.schedule_policy", "no servers to schedule requests over"},
      {"rollout.pause_grace_period", "no servers to pause"},
      {"train_dataset.pin_memory", "data is read in-process"},
      {"train_dataset.num_workers", "data is read in-process"},
      {"valid_dataset.pin_memory", "data is read in-process"},
      {"valid_dataset.num_workers", "data is read in-process"},
      {"stats_logger.wandb.", "no Weights & Biases; stats go to stats.jsonl and TensorBoard"},
      {"stats_logger.swanlab.", "no SwanLab; stats go to stats.jsonl and TensorBoard"},
      {"perf_tracer.", "no perf tracer; stats.jsonl has each step's rollout and train seconds"},
  };
  return keys;
}

// AReaL removed these and refuses them with this migration (areal/api/cli_args.py).
constexpr const char* kRemovedBehaveKeys =
    "AReaL removed behave_imp_weight_cap/behave_imp_weight_mode: use actor.rejection_sampling "
    "(mode disabled: rejection_sampling: null; token_mask with cap X: {level: token, action: mask, metric: ratio, "
    "upper: X}; token_truncate with cap X: {level: token, action: clamp, metric: ratio, upper: X})";

const std::vector<RefusedKey>& refused_areal_keys() {
  static const std::vector<RefusedKey> keys = {
      {"critic.", "areal-train has no critic (a value model trained beside the policy, as AReaL's PPO example "
                  "has); train without one: GRPO, Dr.GRPO, RLOO, REINFORCE++ or DAPO (docs/rl.md)"},
      {"actor.use_sapo_loss", "SAPO is not built in areal-train yet; use the PPO clip (actor.eps_clip, "
                              "actor.eps_clip_higher)"},
      {"actor.m2_threshold", "M2PO is not built in areal-train yet"},
      {"actor.megatron.", "the Megatron engine is not built in areal-train; its own FSDP engine trains "
                          "(actor.backend: fsdp:dN)"},
      {"actor.archon.", "the Archon engine is not built in areal-train; its own FSDP engine trains "
                        "(actor.backend: fsdp:dN)"},
      {"model.archon.", "the Archon engine is not built in areal-train; its own FSDP engine trains "
                        "(actor.backend: fsdp:dN)"},
      {"actor.behave_imp_weight_cap", kRemovedBehaveKeys},
      {"actor.behave_imp_weight_mode", kRemovedBehaveKeys},
      {"actor.prox_logp_method", "the log-linear approximation of the proximal policy is not built in areal-train: "
                                 "it recomputes the proximal log-probabilities with a forward pass (recompute; "
                                 "metrics is the same training, its approximation metrics are not logged)",
       {"recompute", "metrics"}},
      {"teacher.", "distillation from a teacher model (AReaL's examples/distillation) is not built in areal-train"},
      {"tir.", "AReaL's tool-integrated-reasoning workflow is Python code; areal-train runs tools in episodes: "
               "env (builtin:calculator or command:) with agent_run_args.max_turns (docs/agentic.md)"},
  };
  return keys;
}

namespace {

const RefusedKey* refused_areal_key(const std::string& name) {
  for (const RefusedKey& k : refused_areal_keys()) {
    const std::string& p = k.pattern;
    const bool match = p.back() == '.' ? starts_with(name, p) || name == p.substr(0, p.size() - 1) : name == p;
    if (match) return &k;
  }
  return nullptr;
}

}  // namespace

std::string refused_areal_key_reason(const std::string& name) {
  const RefusedKey* k = refused_areal_key(name);
  return k ? k->reason : "";
}

bool listed_areal_key(const std::string& name) {
  return refused_areal_key(name) != nullptr || !ignored_areal_key_reason(name).empty();
}

bool refused_areal_key_accepts(const std::string& name, const std::string& value) {
  const RefusedKey* k = refused_areal_key(name);
  return k && std::find(k->same.begin(), k->same.end(), value) != k->same.end();
}

bool null_means_default(const std::string& option) {
  static const std::vector<std::string> nullable = {
      "total_train_steps", "saver.freq_epochs", "saver.freq_steps", "saver.freq_secs", "recover.freq_epochs",
      "recover.freq_steps", "recover.freq_secs", "evaluator.freq_epochs", "evaluator.freq_steps",
      "evaluator.freq_secs", "train_dataset.max_length", "valid_dataset.max_length", "actor.eps_clip_higher",
      "actor.c_clip", "actor.behav_imp_weight_cap", "actor.rejection_sampling.lower", "actor.mb_spec.max_tokens_per_mb", "stats_logger.tensorboard.path",
      "rollout.max_running_requests", "rollout.max_concurrent_rollouts", "rollout.queue_size", "actor.overlong_tokens", "actor.overlong_penalty_factor", "gconfig.stop"};
  return std::find(nullable.begin(), nullable.end(), option) != nullable.end();
}

std::string ignored_keys_summary(const std::vector<std::string>& notes) {
  std::vector<std::pair<std::string, std::vector<std::string>>> by_reason;  // in order of first use
  for (const std::string& note : notes) {
    const size_t colon = note.find(": ");
    const std::string key = note.substr(0, colon), why = colon == std::string::npos ? "" : note.substr(colon + 2);
    auto it = std::find_if(by_reason.begin(), by_reason.end(), [&](const auto& r) { return r.first == why; });
    if (it == by_reason.end()) by_reason.push_back({why, {key}});
    else it->second.push_back(key);
  }
  std::vector<std::string> parts;
  for (const auto& [why, keys] : by_reason) parts.push_back(cat(join(keys, ", "), " (", why, ")"));
  return join(parts, "; ");
}

std::string canonical_option_name(const std::string& name) {
  for (const OptionAlias& a : option_aliases()) {
    if (a.areal_name.back() == '.') {
      const std::string group = a.areal_name.substr(0, a.areal_name.size() - 1);
      if (name == group) return a.option.substr(0, a.option.size() - 1);
      if (starts_with(name, a.areal_name)) return a.option + name.substr(a.areal_name.size());
    } else if (name == a.areal_name) {
      return a.option;
    }
  }
  return name;
}

std::string ignored_areal_key_reason(const std::string& name) {
  for (const IgnoredKey& k : ignored_areal_keys()) {
    const std::string& p = k.pattern;
    bool match = false;
    if (starts_with(p, "*.")) {  // one section, then the leaf
      const size_t dot = name.find('.');
      match = dot != std::string::npos && name.substr(dot + 1) == p.substr(2);
    } else if (p.back() == '.') {
      match = starts_with(name, p) || name == p.substr(0, p.size() - 1);
    } else {
      match = name == p;
    }
    if (match) return k.reason;
  }
  return "";
}

}  // namespace areal
