#include "areal/config/validate.h"

#include <unistd.h>

#include <cstdlib>
#include <cmath>
#include <filesystem>

#include "areal/config/allocation.h"
#include "areal/config/schema.h"
#include "areal/util/error.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

// "openai/gsm8k", "Qwen/Qwen2.5-0.5B": a name on the Hugging Face hub, which
// areal-train does not download.
bool looks_like_hub_id(const std::string& path) {
  const size_t slash = path.find('/');
  return slash != std::string::npos && slash > 0 && path.find('/', slash + 1) == std::string::npos &&
         path[0] != '.' && path[0] != '~' && path.find(':') == std::string::npos &&
         path.find(".json") == std::string::npos;
}

std::string hub_hint(const std::string& path, const std::string& repo_type) {
  if (!looks_like_hub_id(path)) return "";
  return cat(" ('", path, "' looks like a Hugging Face hub id: areal-train reads local files only; download it "
             "first, e.g. `huggingface-cli download", repo_type, " ", path, " --local-dir /data/", path,
             "`, and give that directory", repo_type.empty() ? "" : " as it is (docs/data.md)", ")");
}

// A path that does not exist and names something on the hub is refused here, with how
// to fetch it; other missing files are refused by their readers, before the load too.
void check_not_hub_id(const std::string& option, const std::string& path, const std::string& repo_type) {
  if (path.empty() || path.rfind("builtin:", 0) == 0 || std::filesystem::exists(path) || !looks_like_hub_id(path))
    return;
  throw ConfigError(cat("option '", option, "': '", path, "' does not exist", hub_hint(path, repo_type)));
}

// reward_fn: a built-in name, or `command:` with a program that exists (a path, or a
// name found in PATH). Whether the program runs shows when its workers start, still
// before the init (job_inputs.h).
void check_reward_fn(const std::string& reward_fn) {
  const std::string prefix = "command:";
  if (reward_fn.rfind(prefix, 0) != 0) {
    if (reward_fn != "exact_match" && reward_fn != "math")
      throw ConfigError(cat("option 'reward_fn' = '", reward_fn, "' is unknown (exact_match, math, or "
                            "command:<shell command>)"));
    return;
  }
  const std::string command = trim(reward_fn.substr(prefix.size()));
  const std::string program = command.substr(0, command.find_first_of(" \t"));
  if (program.empty()) throw ConfigError("option 'reward_fn' = 'command:' names no command");
  if (program.find('/') != std::string::npos) {
    if (!std::filesystem::exists(program))
      throw ConfigError(cat("option 'reward_fn': the program '", program, "' does not exist"));
    return;
  }
  const char* path = std::getenv("PATH");
  for (const std::string& dir : split(path ? path : "", ':'))
    if (!dir.empty() && ::access((std::filesystem::path(dir) / program).c_str(), X_OK) == 0) return;
  throw ConfigError(cat("option 'reward_fn': the program '", program, "' is not found in PATH"));
}

// AReaL's RejectionSamplingConfig.__post_init__ rules, with the option names.
void check_rejection_sampling(const ActorConfig& actor) {
  const RejectionSamplingConfig& rs = actor.rejection_sampling;
  if (rs.level == "none") return;
  if (actor.behav_imp_weight_cap != 0.0)
    throw ConfigError("options 'actor.behav_imp_weight_cap' and 'actor.rejection_sampling' both set the decoupled "
                      "loss's filter; keep rejection_sampling (the cap X is rejection_sampling {level: token, "
                      "action: mask, metric: ratio, upper: X})");
  const std::string at = "option 'actor.rejection_sampling.";
  if (rs.lower > rs.upper)
    throw ConfigError(cat(at, "lower' = ", rs.lower, " is greater than 'actor.rejection_sampling.upper' = ", rs.upper));
  if (rs.metric == "ratio" && rs.upper <= 1.0)
    throw ConfigError(cat(at, "upper' = ", rs.upper, ": with metric ratio it must be > 1 (at most 1 would filter "
                          "every token whose policy moved)"));
  if (rs.metric == "ratio" && std::isfinite(rs.lower) && rs.lower <= 0)
    throw ConfigError(cat(at, "lower' = ", rs.lower, ": with metric ratio it must be > 0 (or null: no lower bound)"));
  if ((rs.metric == "kl_k2" || rs.metric == "kl_k3") && rs.upper <= 0)
    throw ConfigError(cat(at, "upper' = ", rs.upper, ": with metric ", rs.metric, " it must be > 0"));
  if (rs.action == "clamp" && rs.metric != "ratio")
    throw ConfigError(cat(at, "action' = clamp clamps the importance ratio: it needs metric ratio (metric is ",
                          rs.metric, "; use action mask to filter by a KL estimate)"));
}

}  // namespace

std::vector<std::string> config_warnings(const Config& cfg) {
  std::vector<std::string> out;
  const ActorConfig& actor = cfg.actor;
  const bool filtered = actor.rejection_sampling.level != "none" || actor.behav_imp_weight_cap != 0.0;
  if (cfg.job != "rl") return out;
  if (filtered && !actor.use_decoupled_loss)
    out.push_back("actor.rejection_sampling (or behav_imp_weight_cap) is set but actor.use_decoupled_loss is false: "
                  "the filter is ignored (AReaL's rule); set use_decoupled_loss: true to use it");
  if (!filtered && actor.use_decoupled_loss)
    out.push_back("actor.use_decoupled_loss with no actor.rejection_sampling: stale tokens are neither filtered nor "
                  "weighted (AReaL's meaning of rejection_sampling: null); AReaL's earlier default was "
                  "rejection_sampling: {level: token, action: mask, metric: ratio, upper: 5.0}");
  if (actor.rejection_sampling.level == "token" && actor.rejection_sampling.agg != "mean")
    out.push_back("actor.rejection_sampling.agg is used at level sequence only; it has no effect at level token");
  return out;
}

void validate_config(const Config& cfg) {
  if (cfg.job == "rl") {
    if (cfg.train_dataset.path.empty())
      throw ConfigError("option 'train_dataset.path' is required for job=rl (a JSONL file of prompts and answers, "
                        "or builtin:arithmetic/train)");
    const NormConfig& an = cfg.actor.adv_norm;
    if ((an.mean_level == "group" || an.std_level == "group") && cfg.actor.group_size != cfg.gconfig.n_samples)
      throw ConfigError(cat("option 'actor.group_size' = ", cfg.actor.group_size, " must equal 'gconfig.n_samples' = ",
                            cfg.gconfig.n_samples, " for a group level of actor.adv_norm: the answers to one prompt "
                            "form one group"));
  }
  if (cfg.job == "rl" || cfg.job == "eval") {  // the jobs that generate
    for (const std::string& stop : cfg.gconfig.stop)
      if (stop.empty())
        throw ConfigError("option 'gconfig.stop': an empty stop string would end every answer at its first token");
    if (cfg.agent_run_args.turn_discount <= 0)
      throw ConfigError("option 'agent_run_args.turn_discount' = 0 would score every episode 0; it must be in (0, 1]");
    if (!cfg.env.empty() && cfg.env.rfind("command:", 0) != 0 && cfg.env != "builtin:multi_turn_math" &&
        cfg.env != "builtin:calculator")
      throw ConfigError(cat("option 'env' = '", cfg.env, "' is not an environment: builtin:multi_turn_math, "
                            "builtin:calculator or command:<shell command> (docs/agentic.md)"));
    if (cfg.gconfig.min_new_tokens > cfg.gconfig.max_new_tokens)
      throw ConfigError(cat("option 'gconfig.min_new_tokens' = ", cfg.gconfig.min_new_tokens,
                            " is more than 'gconfig.max_new_tokens' = ", cfg.gconfig.max_new_tokens));
  }
  if (cfg.job == "rl" && cfg.rollout.consumer_batch_size != 0 &&
      cfg.rollout.consumer_batch_size != cfg.train_dataset.batch_size)
    throw ConfigError(cat("option 'rollout.consumer_batch_size' = ", cfg.rollout.consumer_batch_size,
                          " must equal 'train_dataset.batch_size' = ", cfg.train_dataset.batch_size,
                          ": a training step takes one batch of groups from the queue (0 or ${train_dataset.batch_size} "
                          "says so)"));
  if (cfg.job == "sft" && cfg.evaluator.n_samples > 0)
    throw ConfigError(cat("option 'evaluator.n_samples' = ", cfg.evaluator.n_samples, " samples answers in job=rl; "
                          "job=sft evaluates the held-out loss (pass@k of an SFT checkpoint: --job eval)"));
  if (cfg.job == "rl" && cfg.train_dataset.type == "sft")
    throw ConfigError("option 'train_dataset.type' = sft is for job=sft; job=rl trains on prompts (type rl)");
  if (cfg.job == "rl" && cfg.valid_dataset.type == "sft")
    throw ConfigError("option 'valid_dataset.type' = sft is for job=sft; job=rl evaluates on prompts (type rl)");
  if (cfg.job == "rl" || cfg.job == "sft" || cfg.job == "preview" || cfg.job == "eval") {
    check_not_hub_id("train_dataset.path", cfg.train_dataset.path, " --repo-type dataset");
    check_not_hub_id("valid_dataset.path", cfg.valid_dataset.path, " --repo-type dataset");
    check_not_hub_id("tokenizer_path", cfg.tokenizer_path, "");
  }
  if (cfg.job == "preview" && cfg.train_dataset.path.empty())
    throw ConfigError("option 'train_dataset.path' is required for job=preview (the prompts to show)");
  if (cfg.job == "eval" && cfg.valid_dataset.path.empty())
    throw ConfigError("option 'valid_dataset.path' is required for job=eval (the prompts and answers to evaluate on: "
                      "a JSONL file, a Hugging Face dataset folder or builtin:arithmetic/test)");
  if (cfg.job == "eval" && cfg.valid_dataset.type == "sft")
    throw ConfigError("option 'valid_dataset.type' = sft is for job=sft; job=eval samples answers to prompts (type rl)");
  if (cfg.job == "sft" && cfg.train_dataset.path.empty())
    throw ConfigError("option 'train_dataset.path' is required for job=sft (a JSONL file of {\"text\": ...} rows)");

  if (cfg.fsdp.memory_efficient_load && cfg.init_from_scratch)
    throw ConfigError(
        "options 'fsdp.memory_efficient_load' and 'init_from_scratch' cannot both be true: "
        "memory_efficient_load streams weights from model_path, and init_from_scratch loads nothing. "
        "Set fsdp.memory_efficient_load=false to start from scratch.");

  if (!cfg.init_from_scratch) {
    if (cfg.model_path.empty())
      throw ConfigError("option 'model_path' is required (a Hugging Face checkpoint directory), "
                        "unless init_from_scratch=true");
    if (!std::filesystem::exists(cfg.model_path))
      throw ConfigError(cat("option 'model_path': '", cfg.model_path, "' does not exist", hub_hint(cfg.model_path, "")));
  }

  parse_allocation(cfg);
  check_reward_fn(cfg.reward_fn);

  const NormConfig& rn = cfg.actor.reward_norm;
  if ((rn.mean_level == "group" || rn.std_level == "group") && rn.group_size != cfg.gconfig.n_samples)
    throw ConfigError(cat("option 'actor.reward_norm.group_size' = ", rn.group_size, " must equal 'gconfig.n_samples' = ",
                          cfg.gconfig.n_samples, " for a group level: the answers to one prompt form one group"));
  if (cfg.actor.behav_imp_weight_cap != 0.0 && cfg.actor.behav_imp_weight_cap <= 1.0)
    throw ConfigError(cat("option 'actor.behav_imp_weight_cap' = ", cfg.actor.behav_imp_weight_cap,
                          ": the cap must be > 1 (or 0: unset)"));
  check_rejection_sampling(cfg.actor);
  if (cfg.actor.mb_spec.packing_algorithm != "ffd")
    throw ConfigError(cat("option 'actor.mb_spec.packing_algorithm' = '", cfg.actor.mb_spec.packing_algorithm,
                          "': areal-train packs micro-batches first fit decreasing (`ffd`, AReaL's default)",
                          cfg.actor.mb_spec.packing_algorithm == "kk"
                              ? "; Karmarkar-Karp (`kk`) is not built in"
                              : "; AReaL's choices are ffd and kk, and kk is not built in"));
  if (cfg.actor.overlong_reward_penalty) {
    if (cfg.actor.overlong_tokens < 1 || cfg.actor.overlong_penalty_factor <= 0)
      throw ConfigError(cat("option 'actor.overlong_reward_penalty' needs actor.overlong_tokens >= 1 and "
                            "actor.overlong_penalty_factor > 0 (they are ", cfg.actor.overlong_tokens, " and ",
                            cfg.actor.overlong_penalty_factor, ")"));
    if (cfg.actor.overlong_tokens > cfg.gconfig.max_new_tokens)
      throw ConfigError(cat("option 'actor.overlong_tokens' = ", cfg.actor.overlong_tokens,
                            " is longer than an answer may be ('gconfig.max_new_tokens' = ", cfg.gconfig.max_new_tokens,
                            ")"));
  }
  if (cfg.actor.dynamic_sampling && cfg.gconfig.n_samples < 2)
    throw ConfigError("option 'actor.dynamic_sampling' compares the answers of a group: it needs gconfig.n_samples >= 2");
  if (!cfg.actor.lora_adapter_path.empty()) {
    const std::filesystem::path dir = cfg.actor.lora_adapter_path;
    if (!cfg.actor.use_lora)
      throw ConfigError("option 'actor.lora_adapter_path' needs actor.use_lora: true (it names adapters to train)");
    for (const char* file : {"adapter_config.json", "adapter_model.safetensors"})
      if (!std::filesystem::exists(dir / file))
        throw ConfigError(cat("option 'actor.lora_adapter_path': '", (dir / file).string(),
                              "' does not exist (a PEFT adapter directory holds adapter_config.json and "
                              "adapter_model.safetensors)"));
  }
  if (cfg.actor.router_aux_loss_coef < 0 && cfg.actor.router_aux_loss_coef != -1)
    throw ConfigError(cat("option 'actor.router_aux_loss_coef' = ", cfg.actor.router_aux_loss_coef,
                          ": a weight >= 0, or -1 for the model's own"));
  if (cfg.actor.c_clip != 0.0 && cfg.actor.c_clip <= 1.0)
    throw ConfigError(cat("option 'actor.c_clip' = ", cfg.actor.c_clip, ": the dual-clip bound must be > 1 (or 0: off)"));

  // A declared option whose feature does not exist yet must not be silently ignored.
  const Config defaults;
  for (const auto& spec : option_schema()) {
    if (!spec.not_implemented.empty() && spec.format(cfg) != spec.format(defaults))
      throw ConfigError(cat("option '", spec.name, "' = ", spec.format(cfg), ": ", spec.not_implemented,
                            " is not implemented yet; leave it at its default (", spec.format(defaults), ")"));
  }
}

}  // namespace areal
