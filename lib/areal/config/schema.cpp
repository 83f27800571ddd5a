// THE place where options are declared. One line (plus its doc) per option; the
// default is the in-class initializer in config.h, the type is the field's type.
#include "areal/config/schema.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <type_traits>

#include "areal/util/error.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

// ---- typing text values ---------------------------------------------------------

[[noreturn]] void bad_value(const std::string& name, const RawValue& raw, const std::string& text,
                            const std::string& why) {
  throw ConfigError(cat(raw.origin, ": option '", name, "': '", text, "' ", why));
}

bool parse_scalar(const std::string& name, const RawValue& raw, const std::string& text, bool*) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "true" || lower == "yes" || lower == "on" || lower == "1") return true;
  if (lower == "false" || lower == "no" || lower == "off" || lower == "0") return false;
  bad_value(name, raw, text, "is not a boolean (use true or false)");
}

int64_t parse_scalar(const std::string& name, const RawValue& raw, const std::string& text, int64_t*) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) bad_value(name, raw, text, "is out of the range of a 64-bit integer");
  if (ec != std::errc() || end != text.data() + text.size()) bad_value(name, raw, text, "is not an integer");
  return value;
}

double parse_scalar(const std::string& name, const RawValue& raw, const std::string& text, double*) {
  std::string lower = text;  // YAML's own spellings of infinity
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == ".inf" || lower == "+.inf") return INFINITY;
  if (lower == "-.inf") return -INFINITY;
  double value = 0;
  const char* begin = text.data() + (!text.empty() && text[0] == '+');
  auto [end, ec] = std::from_chars(begin, text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    bad_value(name, raw, text, "is not a number");
  if (std::isnan(value)) bad_value(name, raw, text, "is not a number");
  return value;  // infinities are refused by check_constraints, unless the option allows -inf
}

std::string parse_scalar(const std::string&, const RawValue&, const std::string& text, std::string*) {
  return text;
}

std::string format_scalar(bool v) { return v ? "true" : "false"; }
std::string format_scalar(int64_t v) { return std::to_string(v); }
std::string format_scalar(const std::string& v) { return v; }
std::string format_scalar(double v) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);  // shortest exact form
  std::string text(buffer, end);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";  // keep it visibly a float
  return text;
}

template <typename T> struct TypeOf;
template <> struct TypeOf<bool> { static constexpr OptionType value = OptionType::Bool; };
template <> struct TypeOf<int64_t> { static constexpr OptionType value = OptionType::Int; };
template <> struct TypeOf<double> { static constexpr OptionType value = OptionType::Float; };
template <> struct TypeOf<std::string> { static constexpr OptionType value = OptionType::String; };
template <> struct TypeOf<std::vector<std::string>> { static constexpr OptionType value = OptionType::StringList; };
template <> struct TypeOf<std::vector<int64_t>> { static constexpr OptionType value = OptionType::IntList; };

template <typename T> struct IsVector : std::false_type {};
template <typename T> struct IsVector<std::vector<T>> : std::true_type { using Item = T; };

// Choices and range apply to every item of a value.
template <typename T>
void check_constraints(const OptionSpec& spec, const RawValue& raw, const std::string& text, const T& value) {
  if constexpr (std::is_same_v<T, std::string>) {
    if (!spec.choices.empty() && std::find(spec.choices.begin(), spec.choices.end(), value) == spec.choices.end())
      bad_value(spec.name, raw, text, cat("is not allowed (", describe_constraint(spec), ")"));
  } else if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    double v = static_cast<double>(value);
    if (std::isinf(v) && !(spec.minus_infinity_is_none && v < 0)) bad_value(spec.name, raw, text, "is not a finite number");
    bool below = spec.min && (spec.min_exclusive ? v <= *spec.min : v < *spec.min);
    bool above = spec.max && v > *spec.max;
    if (below || above) bad_value(spec.name, raw, text, cat("is out of range (must be ", describe_constraint(spec), ")"));
  }
}

// Declaration helper: OPTION(fsdp.memory_efficient_load).doc("...") binds the
// dotted name to the Config member of the same path.
struct Decl {
  OptionSpec spec;
  Decl& doc(std::string text) { spec.doc = std::move(text); return *this; }
  Decl& choices(std::vector<std::string> values) { spec.choices = std::move(values); return *this; }
  Decl& at_least(double lo) { spec.min = lo; return *this; }
  Decl& positive() { spec.min = 0; spec.min_exclusive = true; return *this; }
  Decl& range(double lo, double hi) { spec.min = lo; spec.max = hi; return *this; }
  Decl& minus_infinity_is_none() { spec.minus_infinity_is_none = true; return *this; }
  Decl& planned(std::string feature) { spec.not_implemented = std::move(feature); return *this; }
};

template <typename Access>
Decl make_option(const char* name, Access access) {
  using T = std::remove_cvref_t<decltype(access(std::declval<Config&>()))>;
  Decl decl;
  decl.spec.name = name;
  decl.spec.type = TypeOf<T>::value;
  decl.spec.assign = [access, name](Config& cfg, const RawValue& raw) {
    const OptionSpec& spec = *find_option(name);
    if constexpr (IsVector<T>::value) {
      using Item = typename IsVector<T>::Item;
      T values;
      for (const auto& text : raw.items) {
        Item v = parse_scalar(spec.name, raw, text, static_cast<Item*>(nullptr));
        check_constraints(spec, raw, text, v);
        values.push_back(v);
      }
      access(cfg) = values;
    } else {
      if (raw.is_list || raw.items.size() != 1)
        throw ConfigError(cat(raw.origin, ": option '", spec.name, "' takes one ", type_name(spec.type),
                              " value, not a list"));
      T v = parse_scalar(spec.name, raw, raw.items[0], static_cast<T*>(nullptr));
      check_constraints(spec, raw, raw.items[0], v);
      access(cfg) = v;
    }
  };
  decl.spec.items = [access](const Config& cfg) {
    std::vector<std::string> out;
    if constexpr (IsVector<T>::value) {
      for (const auto& v : access(cfg)) out.push_back(format_scalar(v));
    } else {
      out.push_back(format_scalar(access(cfg)));
    }
    return out;
  };
  decl.spec.format = [items = decl.spec.items](const Config& cfg) {
    if constexpr (IsVector<T>::value) return "[" + join(items(cfg), ", ") + "]";
    else return items(cfg)[0];
  };
  return decl;
}

#define OPTION(path) make_option(#path, [](auto& cfg) -> auto& { return cfg.path; })

std::vector<OptionSpec> declare_options() {
  const std::vector<std::string> dtypes = {"bfloat16", "float16", "float32"};
  std::vector<Decl> d = {
      // ---- the run ----
      OPTION(job).doc("What to run: `init` (the staged initialization, then a table of its stages), "
                      "`sft` (init, then supervised fine-tuning on train_dataset.path with the byte-level "
                      "tokenizer), `rl` (init, then the GRPO/PPO loop on the prompts of train_dataset.path), "
                      "`preview` (prints the first preview_prompts prompts of train_dataset.path as the rollout "
                      "feeds them: chat template applied, text and token ids; no model is loaded), "
                      "`eval` (init, then gconfig.n_samples sampled answers to every prompt of valid_dataset.path, "
                      "scored by reward_fn or env: pass@k, maj@k and per-prompt results under the run directory's "
                      "eval/, docs/evaluation.md).")
          .choices({"init", "sft", "rl", "preview", "eval"}),
      OPTION(experiment_name).doc("Name of the experiment; used in output paths."),
      OPTION(trial_name).doc("Name of this trial of the experiment; used in output paths."),
      OPTION(model_path).doc("Hugging Face checkpoint directory (config.json + safetensors) to start from. "
                             "Empty with init_from_scratch: a built-in tiny model."),
      OPTION(tokenizer_path).doc("A Hugging Face tokenizer.json (or its directory), or `byte` for the byte-level "
                                 "tokenizer. Empty: model_path's tokenizer.json if there is one, else `byte`."),
      OPTION(chat_template).doc("How prompts become the model's input: `auto` (the model's own chat template when "
                                "its tokenizer folder has one, else `none`), `model` (the model's own template: "
                                "chat_template.jinja, chat_template.json or tokenizer_config.json's chat_template, "
                                "rendered as transformers' apply_chat_template with add_generation_prompt), `none` "
                                "(the prompt as is), `qwen` (ChatML, one user turn), `llama3` (LLaMA 3 headers, one "
                                "user turn).")
          .choices({"auto", "model", "none", "qwen", "llama3"}),
      OPTION(preview_prompts).doc("job=preview: how many prompts to print.").at_least(1),
      OPTION(enable_thinking).doc("Passed to the model's chat template as `enable_thinking` (Qwen3's thinking "
                                  "switch; AReaL's workflow option, false in its math examples)."),
      OPTION(reward_fn).doc("Reward of an answer against the dataset's reference: `exact_match` (equal after "
                            "trimming whitespace), `math` (the final answer, numerically equal), or "
                            "`command:<shell command>`: your program, run as reward_workers processes per rank, "
                            "reads one JSON object per line (AReaL's reward_fn arguments: prompt, completions, "
                            "prompt_ids, completion_ids and the dataset row's fields) and writes one number per "
                            "line (docs/rl.md)."),
      OPTION(reward_workers).doc("Worker processes per rank for a `command:` reward_fn (they score a step's "
                                 "answers in parallel).").at_least(1),
      OPTION(reward_timeout).doc("Seconds one reward call may take; past it the answer scores 0, is counted "
                                 "in reward_failures, and the worker is restarted.").positive(),
      OPTION(env).doc("The environment of multi-turn episodes (docs/agentic.md): empty (with "
                      "agent_run_args.max_turns > 1: the answer is scored by reward_fn and, while wrong, the "
                      "model is asked to try again, AReaL's multi-turn math), `builtin:multi_turn_math` (the "
                      "same), `builtin:calculator` (the model writes <calc>expression</calc>, the tool "
                      "replies with its value), or `command:<shell command>`: your program, run as "
                      "env_workers processes per generation rank, reads one JSON object per line (the "
                      "episode so far) and writes one per line (a message to continue, or the end with a "
                      "reward)."),
      OPTION(env_workers).doc("Worker processes per generation rank for a `command:` env.").at_least(1),
      OPTION(env_timeout).doc("Seconds one environment call may take; past it the episode ends with reward "
                              "0, is counted in env_failures, and the worker is restarted.").positive(),
      OPTION(export_style).doc("How an episode is trained (AReaL's name): `concat`, as one sequence whose "
                               "environment tokens have loss mask 0.")
          .choices({"concat"}),
      OPTION(init_from_scratch).doc("Initialize weights from `seed` instead of loading `model_path`."),
      OPTION(allocation_mode)
          .doc("Deprecated (AReaL's older spelling of `rollout.backend` + `actor.backend`): `static` (every "
               "rank trains and generates), `fsdp:dN` / `dN`, or `sglang:dDtT+fsdp:dN`."),
      OPTION(device).doc("Device of each rank: `auto` (cuda:<local_rank> when CUDA is available, else cpu), "
                         "`cuda` or `cpu`.")
          .choices({"auto", "cuda", "cpu"}),
      OPTION(seed).doc("Random seed for initialization, data order and sampling.").at_least(0),
      OPTION(total_train_epochs).doc("Number of passes over the training dataset.").at_least(1),
      OPTION(total_train_steps).doc("Stop after this many training steps (0: no limit beyond the epochs).").at_least(0),
      OPTION(dynamic_bs).doc("With actor.dynamic_sampling (AReaL's meaning): true, a step trains on the groups "
                             "that stay (a smaller batch); false, the batch is refilled with groups that carry a "
                             "signal, generated from more prompts (docs/rl.md)."),

      OPTION(cluster.fileroot).doc("Root directory for checkpoints, recovery state and logs."),
      OPTION(cluster.collective_timeout).doc("Seconds a collective may wait for the other ranks before the job "
                                             "ends, naming it (a stopped or hung rank). Covers the CPU (MPI) "
                                             "path; allow for the longest phase in which ranks wait for one "
                                             "another (a save, a long rollout).").at_least(1),

      // ---- FSDP engine ----
      OPTION(fsdp.memory_efficient_load)
          .doc("Rank 0 streams the checkpoint tensor by tensor and sends each rank its shard; no rank holds "
               "the whole model. Without it, every rank reads only its own slices of the checkpoint (no "
               "whole model either, and the ranks read in parallel); use it when only rank 0 can read the "
               "checkpoint or the filesystem punishes many readers. Cannot be combined with `init_from_scratch`."),
      OPTION(fsdp.reshard_after_forward).doc("Free each unit's gathered weights after its forward pass.")
          .planned("keeping gathered units after forward"),
      OPTION(fsdp.offload_params).doc("Keep parameter shards in host memory between uses.")
          .planned("parameter offloading"),
      OPTION(fsdp.prefetch_depth)
          .doc("Units whose all-gather runs ahead of the unit computing, forward and backward; the previous "
               "unit's gradient reduce-scatter also stays in flight while the next one computes. Each step "
               "of depth holds one more gathered unit. 0: no overlap (every collective waits in place).")
          .at_least(0),
      OPTION(fsdp.wrap_policy.transformer_layer_cls_to_wrap)
          .doc("Module classes that form one FSDP unit each (empty: every decoder layer).")
          .planned("custom FSDP wrap policies"),

      // ---- optimizer ----
      OPTION(optimizer.type).doc("Optimizer.").choices({"adam"}),
      OPTION(optimizer.lr).doc("Peak learning rate.").at_least(0),
      OPTION(optimizer.weight_decay).doc("Decoupled weight decay (AdamW).").at_least(0),
      OPTION(optimizer.beta1).doc("Adam beta1.").range(0, 1),
      OPTION(optimizer.beta2).doc("Adam beta2.").range(0, 1),
      OPTION(optimizer.eps).doc("Adam epsilon.").positive(),
      OPTION(optimizer.lr_scheduler_type).doc("Learning-rate schedule after warm-up.")
          .choices({"constant", "linear", "cosine"}),
      OPTION(optimizer.warmup_steps_proportion).doc("Share of all training steps spent in linear warm-up.")
          .range(0, 1),
      OPTION(optimizer.min_lr_ratio).doc("Final learning rate as a share of the peak (linear, cosine).")
          .range(0, 1),
      OPTION(optimizer.gradient_clipping).doc("Clip the global gradient norm to this value (0: no clipping).")
          .at_least(0),

      // ---- actor (the policy being trained) ----
      OPTION(actor.backend)
          .doc("Training shape, AReaL's spelling `fsdp:dN` (N data-parallel FSDP ranks; N = the world "
               "size), or `fsdp:dNeE` for a mixture of experts: each group of E of the N ranks runs "
               "experts/E of every sparse layer for the group's tokens (expert parallelism; E divides N and "
               "the experts), or `fsdp:dDtTcC` (D x T x C = the world size): D data-parallel groups of "
               "T x C ranks sharing their rows, each layer's heads, channels and vocabulary split over T "
               "consecutive ranks (tensor parallelism) and every sequence over C ranks (context "
               "parallelism); both for job=sft, and job=rl with t1 generation. Empty: every rank trains."),
      OPTION(actor.dtype).doc("Compute dtype of gathered weights and activations (shards stay float32).")
          .choices(dtypes),
      OPTION(actor.grad_reduce_dtype).doc("Dtype in which gradients are reduce-scattered.").choices(dtypes),
      OPTION(actor.gradient_checkpointing).doc("Recompute each decoder layer's forward in backward instead of "
                                               "keeping its activations: less memory, about a third more "
                                               "compute."),
      OPTION(actor.router_aux_loss_coef).doc("A mixture of experts' load-balancing loss (transformers' "
                                             "load_balancing_loss_func, per forward over its tokens) is added to "
                                             "the SFT and RL losses with this weight; 0: not added. -1 (the "
                                             "default): as transformers, the model's config.json decides (its "
                                             "router_aux_loss_coef when it sets output_router_logits, else 0). "
                                             "Set on a dense model: refused.")
          .at_least(-1),
      OPTION(actor.router_replay).doc("RL on a mixture of experts: the training forwards on the current "
                                      "weights (log-prob recomputation and the updates) send each token to "
                                      "the experts its rollout chose instead of the router's own top-k, the "
                                      "gate weights staying the router's probabilities at them (routing "
                                      "replay: keeps the PPO ratio near 1). The rollout records the choices "
                                      "either way and every step logs moe_route_agreement (1 with the "
                                      "replay) and moe_router_agreement (the router's own). Set on a dense "
                                      "model: refused."),
      OPTION(actor.mb_spec.max_tokens_per_mb).doc("Split each minibatch into micro-batches of at most this many "
                                                  "tokens, each one packed row without padding (first-fit "
                                                  "decreasing; a longer sequence goes alone). 0: one micro-batch "
                                                  "per minibatch, padded (SFT; RL where actor.share_prompts does "
                                                  "not apply) or packed (RL with shared prompts).").at_least(0),
      OPTION(actor.mb_spec.packing_algorithm).doc("How sequences are packed into micro-batches under "
                                                  "max_tokens_per_mb: `ffd` (first fit decreasing, AReaL's "
                                                  "default and the one built in; AReaL's `kk` is refused)."),
      OPTION(actor.share_prompts).doc("RL: the PPO updates and log-prob recomputations run packed "
                                      "micro-batches (one per minibatch when actor.mb_spec.max_tokens_per_mb "
                                      "is 0) in which the answers to one prompt hold the prompt once and "
                                      "attend to that copy, so its forward and backward run once, not once "
                                      "per answer (the same loss and gradients up to rounding). Not for "
                                      "dynamic NTK rope scaling, context parallelism and a mixture of "
                                      "experts' recorded routing (padded or plain packed rows there). "
                                      "areal-train's own option."),
      OPTION(actor.use_lora).doc("Train LoRA adapters instead of the full weights (the base is frozen)."),
      OPTION(actor.lora_rank).doc("LoRA rank.").at_least(1),
      OPTION(actor.lora_alpha).doc("LoRA alpha (scale = alpha / rank).").at_least(1),
      OPTION(actor.target_modules).doc("Linear layers that get LoRA adapters: `all-linear` or names among "
                                       "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj."),
      OPTION(actor.lora_adapter_path).doc("Start LoRA from this PEFT adapter directory (adapter_config.json + "
                                          "adapter_model.safetensors, as PEFT's save_pretrained and this "
                                          "trainer's checkpoints write it) instead of fresh adapters. Its r, "
                                          "lora_alpha and target modules must equal actor.lora_rank, lora_alpha "
                                          "and target_modules, and its tensors the base model's shapes. Empty: "
                                          "fresh adapters (B = 0)."),
      OPTION(actor.group_size).doc("Answers per prompt that form one group for advantage normalization.")
          .at_least(1),
      OPTION(actor.ppo_n_minibatches).doc("Minibatch updates per rollout batch.").at_least(1),
      OPTION(actor.eps_clip).doc("PPO clipping range (ratio within 1 +/- eps_clip).").positive(),
      OPTION(actor.eps_clip_higher).doc("Upper clipping range if different from eps_clip (0: same).").at_least(0),
      OPTION(actor.c_clip).doc("Dual-clip bound for negative advantages, > 1 (0: off).").at_least(0),
      OPTION(actor.temperature).doc("Temperature applied to logits when computing log-probabilities.").positive(),
      OPTION(actor.reward_scaling).doc("Reward transform: (reward + reward_bias) * reward_scaling, then clipped.").positive(),
      OPTION(actor.reward_bias).doc("Added to every reward before scaling."),
      OPTION(actor.reward_clip).doc("Transformed rewards are clipped to +/- this value.").positive(),
      OPTION(actor.reward_norm.mean_level).doc("Normalize the transformed rewards before the advantages: subtract "
                                               "the mean over the `batch`, the `group`, or `none` (AReaL's "
                                               "reward_norm; the default, none/none, is AReaL's null).")
          .choices({"batch", "group", "none"}),
      OPTION(actor.reward_norm.mean_leave1out).doc("Leave the answer itself out of its group's reward mean (RLOO)."),
      OPTION(actor.reward_norm.std_level).doc("Divide the rewards by their std over the `batch`, the `group`, or "
                                              "`none`.")
          .choices({"batch", "group", "none"}),
      OPTION(actor.reward_norm.std_unbiased).doc("Use the unbiased (n-1) standard deviation of the rewards."),
      OPTION(actor.reward_norm.eps).doc("Added to the rewards' std before dividing.").positive(),
      OPTION(actor.reward_norm.group_size).doc("Answers per group for a `group` level; must equal "
                                               "gconfig.n_samples (the answers to one prompt).")
          .at_least(1),
      OPTION(actor.adv_norm.mean_level).doc("Subtract the advantage mean over the `batch`, the `group`, or `none`.")
          .choices({"batch", "group", "none"}),
      OPTION(actor.adv_norm.mean_leave1out).doc("Leave the answer itself out of its group mean."),
      OPTION(actor.adv_norm.std_level).doc("Divide by the advantage std over the `batch`, the `group`, or `none`.")
          .choices({"batch", "group", "none"}),
      OPTION(actor.adv_norm.std_unbiased).doc("Use the unbiased (n-1) standard deviation."),
      OPTION(actor.adv_norm.eps).doc("Added to the std before dividing.").positive(),
      OPTION(actor.kl_ctl).doc("Weight of the KL penalty to the reference model (0: no reference).").at_least(0),
      OPTION(actor.kl_estimator).doc("KL estimator.").choices({"k1", "k2", "k3"}),
      OPTION(actor.discount).doc("Reward discount factor.").range(0, 1),
      OPTION(actor.gae_lambda).doc("GAE lambda.").range(0, 1),
      OPTION(actor.recompute_logprob).doc("Recompute behaviour log-probs with the training engine."),
      OPTION(actor.use_decoupled_loss).doc("Decoupled PPO (AReaL): the ratio is taken against the proximal "
                                           "log-probs the trainer recomputes before the update, and each token's "
                                           "loss is weighted by exp(proximal - behaviour). Implies "
                                           "recompute_logprob."),
      OPTION(actor.rejection_sampling.level)
          .doc("With use_decoupled_loss: filter stale tokens by the divergence of the proximal policy from the "
               "behaviour policy (AReaL's rejection_sampling), per `token` or per `sequence` (every token of an "
               "answer shares its fate; with metric ratio the weight is the answer's geometric mean ratio). "
               "`none` (AReaL's `rejection_sampling: null`, the default): no filter and no behaviour weight. "
               "A rejection_sampling section given in YAML without a level is `token`.")
          .choices({"none", "token", "sequence"}),
      OPTION(actor.rejection_sampling.action)
          .doc("`mask`: tokens (or answers) out of bounds leave the loss (its divisor keeps them); `clamp`: "
               "their behaviour weight exp(proximal - behaviour) is clamped to [lower, upper] (metric ratio only).")
          .choices({"mask", "clamp"}),
      OPTION(actor.rejection_sampling.metric)
          .doc("What is bounded: `ratio` exp(proximal - behaviour); the KL estimators of log r = proximal - "
               "behaviour: `kl_k1` log r, `kl_k2` (log r)^2 / 2, `kl_k3` r - log r - 1.")
          .choices({"ratio", "kl_k1", "kl_k2", "kl_k3"}),
      OPTION(actor.rejection_sampling.agg)
          .doc("Sequence level: how an answer's token values make its value: `sum`, `mean`, `max` (for ratio in "
               "log space: exp of the sum or mean of log r; the geometric mean is length-free).")
          .choices({"sum", "mean", "max"}),
      OPTION(actor.rejection_sampling.upper).doc("Upper bound (ratio: > 1; kl_k2, kl_k3: > 0)."),
      OPTION(actor.rejection_sampling.lower)
          .doc("Lower bound; -inf (AReaL's null) is none (ratio: > 0; clamp: none means 0).")
          .minus_infinity_is_none(),
      OPTION(actor.behav_imp_weight_cap).doc("AReaL's older spelling: X > 1 is rejection_sampling {level: token, "
                                             "action: mask, metric: ratio, upper: X}; 0: unset.")
          .at_least(0),
      OPTION(actor.importance_sampling_level)
          .doc("Importance ratio per `token` (PPO) or per `sequence`: the geometric mean of an answer's token "
               "ratios, one ratio and one clip per answer (GSPO).")
          .choices({"token", "sequence"}),
      OPTION(actor.overlong_reward_penalty)
          .doc("DAPO's soft overlong penalty: an answer longer than gconfig.max_new_tokens - overlong_tokens "
               "loses overlong_penalty_factor x (its excess / overlong_tokens) of reward, before the reward "
               "transform."),
      OPTION(actor.overlong_tokens).doc("With overlong_reward_penalty: the length of the penalized tail (0: AReaL's "
                                        "null).").at_least(0),
      OPTION(actor.overlong_penalty_factor).doc("With overlong_reward_penalty: the penalty at the full length.")
          .at_least(0),
      OPTION(actor.mask_no_eos_with_zero).doc("A truncated answer (cut at gconfig.max_new_tokens, no stop token) "
                                              "scores 0 after reward normalization, as AReaL does."),
      OPTION(actor.dynamic_sampling).doc("DAPO's dynamic sampling: groups whose answers all scored the same carry "
                                         "no signal and leave the step (loss, token counts and batch statistics); "
                                         "when no group has a signal, all stay (AReaL's rule)."),
      OPTION(actor.loss_agg_mode)
          .doc("How the token losses of a minibatch (all ranks) make its loss: `token-mean` (their sum over "
               "the answer tokens' count), `seq-mean-token-sum` (each answer's sum, averaged over answers), "
               "`seq-mean-token-mean` (each answer's mean, averaged over answers), `seq-mean-token-sum-norm` "
               "(each answer's sum over the constant gconfig.max_new_tokens, averaged over answers: Dr.GRPO). "
               "veRL's names; AReaL has token-mean only.")
          .choices({"token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"}),

      // ---- generation ----
      OPTION(rollout.backend)
          .doc("Generation shape `areal:dDtT`: D replicas of T tensor-parallel ranks each. D x T = the world "
               "size: every rank also trains (colocated, synchronous); D x T + actor.backend's ranks = the "
               "world size: the first D x T ranks only generate, the others only train (asynchronous RL, "
               "docs/rl.md). AReaL's `sglang:dDtT` / `vllm:dDtT` mean the built-in engine of "
               "the same shape. Empty: every rank generates alone (t = 1)."),
      OPTION(rollout.max_running_requests)
          .doc("Answers a generation group decodes at once (SGLang's name); a finished answer's row is "
               "refilled from the waiting ones at once (continuous batching). 0: all of the step's answers "
               "at once.")
          .at_least(0),
      OPTION(rollout.max_head_offpolicyness)
          .doc("Asynchronous RL (separate generation ranks): the most weight versions a trained answer's "
               "first token may lag behind the trainer's (AReaL's eta). Generation holds back new prompts "
               "that would exceed it; 0 is synchronous. The synchronous loop is always at 0.")
          .at_least(0),
      OPTION(rollout.consumer_batch_size)
          .doc("Groups (prompts with their gconfig.n_samples answers) the trainer takes from the queue per "
               "step; it must equal train_dataset.batch_size. 0: train_dataset.batch_size.")
          .at_least(0),
      OPTION(rollout.max_concurrent_rollouts)
          .doc("Asynchronous RL: groups being generated at once over all generation replicas (AReaL's "
               "name). 0: rollout.consumer_batch_size.")
          .at_least(0),
      OPTION(rollout.queue_size)
          .doc("Asynchronous RL: finished groups waiting for the trainer, at most; generation holds back new "
               "prompts while the queue is full. 0: no bound but max_head_offpolicyness's.")
          .at_least(0),
      OPTION(gconfig.n_samples).doc("Answers sampled per prompt (job=eval: the k of pass@k and maj@k).").at_least(1),
      OPTION(gconfig.max_new_tokens).doc("Most tokens generated per answer.").at_least(1),
      OPTION(gconfig.min_new_tokens).doc("Fewest tokens generated before a stop token may end an answer.")
          .at_least(0),
      OPTION(gconfig.max_tokens).doc("Most tokens of a prompt and its answer together; an episode (its prompt "
                                     "and every turn) ends there, truncated. It also bounds the KV cache of "
                                     "an episode's row.").at_least(2),
      OPTION(gconfig.greedy).doc("Pick the most likely token instead of sampling."),
      OPTION(gconfig.temperature).doc("Sampling temperature.").positive(),
      OPTION(gconfig.top_p).doc("Nucleus sampling: keep the smallest token set with this much probability.")
          .range(0, 1),
      OPTION(gconfig.top_k).doc("Sample among the k most likely tokens.").at_least(1),
      OPTION(gconfig.stop_token_ids).doc("Token ids that end an answer (besides the tokenizer's EOS)."),
      OPTION(gconfig.stop).doc("Stop strings: an answer ends at the token that completes one of them in its "
                               "decoded text, across token boundaries; the string stays in the answer, as in "
                               "AReaL. Not empty strings; `null`: none."),
      OPTION(agent_run_args.max_turns).doc("Model turns per episode, at most (AReaL's multi-turn example's "
                                           "name). 1 with no env: one answer per sample, as in single-turn RL.")
          .at_least(1),
      OPTION(agent_run_args.turn_discount).doc("An episode's reward is multiplied by turn_discount^(turns - 1) "
                                               "(AReaL's multi-turn meaning; its example script uses 0.9).")
          .range(0, 1),

      // ---- data ----
      OPTION(train_dataset.path).doc("Training data: a .parquet, .arrow or .jsonl file, a folder as Hugging Face "
                                     "downloads a dataset (parquet shards by split, config folders), a "
                                     "datasets.save_to_disk folder, or `builtin:<task>` for a generated task "
                                     "(docs/data.md)."),
      OPTION(train_dataset.split).doc("The split of a dataset folder to train on (empty: `train`)."),
      OPTION(train_dataset.type).doc("Dataset kind, as AReaL names it: `rl` (prompts and reference answers, "
                                     "job=rl) or `sft` (texts or prompt/answer pairs, job=sft).")
          .choices({"rl", "sft"}),
      OPTION(train_dataset.batch_size).doc("Prompts per rollout batch (over all ranks).").at_least(1),
      OPTION(train_dataset.shuffle).doc("Shuffle the prompts every epoch (seeded)."),
      OPTION(train_dataset.drop_last).doc("Drop the last incomplete batch of an epoch."),
      OPTION(train_dataset.max_length).doc("Skip prompts longer than this many tokens (0: no limit).").at_least(0),
      OPTION(train_dataset.prompt_key).doc("Field holding the prompt (a string or chat messages); rows without it "
                                           "are read by their fields: GSM8K, MATH, chat (docs/data.md)."),
      OPTION(train_dataset.answer_key).doc("Field holding the reference answer (job=rl) or the text to train on "
                                           "(job=sft) next to prompt_key; veRL's reward_model.ground_truth when "
                                           "the row has no such field."),
      OPTION(valid_dataset.path).doc("Held-out data: prompts for greedy evaluation (job=rl), or sequences whose "
                                     "loss is evaluated (job=sft); as train_dataset.path (empty: no "
                                     "evaluation)."),
      OPTION(valid_dataset.split).doc("The split of a dataset folder to evaluate on (empty: `test`, AReaL's)."),
      OPTION(valid_dataset.type).doc("Dataset kind: `rl` (held-out prompts and reference answers, job=rl), or "
                                     "`sft` (AReaL's SFT config: held-out sequences, job=sft).")
          .choices({"rl", "sft"}),
      OPTION(valid_dataset.batch_size).doc("Answers generated at once per rank during evaluation (job=rl); "
                                           "held-out sequences per round over all ranks (job=sft).").at_least(1),
      OPTION(valid_dataset.shuffle).doc("Unused for evaluation (every prompt is evaluated once)."),
      OPTION(valid_dataset.drop_last).doc("Unused for evaluation (every prompt is evaluated once)."),
      OPTION(valid_dataset.max_length).doc("Skip held-out prompts longer than this many tokens (0: no limit).")
          .at_least(0),
      OPTION(valid_dataset.prompt_key).doc("Field holding the held-out prompt (as train_dataset.prompt_key)."),
      OPTION(valid_dataset.answer_key).doc("Field holding the held-out reference answer (as train_dataset.answer_key)."),
      OPTION(evaluator.freq_epochs).doc("Evaluate on valid_dataset at the end of every N epochs, besides before the "
                                        "first and after the last step (0: never).").at_least(0),
      OPTION(evaluator.freq_secs).doc("Evaluate on valid_dataset when N seconds have passed since the last "
                                      "evaluation (checked after each step; 0: never).").at_least(0),
      OPTION(evaluator.freq_steps).doc("Evaluate on valid_dataset every N steps, besides before the first and "
                                       "after the last step (0: only those two).").at_least(0),
      OPTION(evaluator.n_samples).doc("areal-train's: besides the greedy accuracy, sample N answers to every "
                                      "held-out prompt (gconfig's temperature, top_p, top_k) and log eval_pass@k "
                                      "and eval_maj@N, as --job eval computes them (0: greedy accuracy only; "
                                      "colocated RL only).").at_least(0),

      // ---- checkpoints, recovery, stats ----
      OPTION(saver.merge_lora).doc("With LoRA, also save the weights with the adapters merged in "
                                   "(W + alpha / rank * B A) to <run dir>/checkpoint-merged."),
      OPTION(saver.freq_epochs).doc("Save a Hugging Face checkpoint to <run dir>/checkpoints/epoch<E>epochstep<S>"
                                    "globalstep<G> at the end of every N epochs (0: never).").at_least(0),
      OPTION(saver.freq_steps).doc("Save a Hugging Face checkpoint to <run dir>/checkpoints/epoch<E>epochstep<S>"
                                   "globalstep<G> every N steps (0: never; the final one goes to "
                                   "<run dir>/checkpoint either way).").at_least(0),
      OPTION(saver.freq_secs).doc("Save a Hugging Face checkpoint there when N seconds have passed since the last "
                                  "(checked after each step; 0: never).").at_least(0),
      OPTION(saver.keep_last).doc("Periodic saves kept in <run dir>/checkpoints, the newest (0: all).").at_least(0),
      OPTION(recover.mode).doc("Resume from <run dir>/recover when it exists: `auto` (or `on`) resumes when "
                               "there is one and starts afresh when not; `resume` requires one; `disabled` (or "
                               "`off`) never resumes and writes none. See docs/recovery.md.")
          .choices({"disabled", "off", "auto", "on", "resume"}),
      OPTION(recover.freq_epochs).doc("Write a recover checkpoint every N epochs (0: never).").at_least(0),
      OPTION(recover.freq_steps).doc("Write a recover checkpoint every N steps (0: never).").at_least(0),
      OPTION(recover.freq_secs).doc("Write a recover checkpoint when N seconds have passed since the last one "
                                    "(checked after each step; 0: never).").at_least(0),
      OPTION(recover.retries).doc("How often scripts/areal-run.sh (and the Slurm scripts) start a failed run "
                                  "again; each start resumes from the last recover checkpoint.").at_least(0),
      OPTION(recover.no_save_optim).doc("Leave the AdamW moments out of recover checkpoints (smaller; a resumed "
                                        "run starts the moments from zero)."),
      OPTION(recover.no_load_optim).doc("Resume the weights and the position but start the AdamW moments "
                                        "from zero."),
      OPTION(stats_logger.tensorboard.path).doc("Directory for TensorBoard event files (empty: none)."),

      // ---- logging ----
      OPTION(log.level).doc("Lowest level logged: debug, info, warn, error.")
          .choices({"debug", "info", "warn", "error"}),
      OPTION(log.all_ranks).doc("Log info lines from every rank, not only rank 0."),
  };
  std::vector<OptionSpec> specs;
  for (auto& decl : d) specs.push_back(std::move(decl.spec));
  return specs;
}

}  // namespace

const std::vector<OptionSpec>& option_schema() {
  static const std::vector<OptionSpec> specs = declare_options();
  return specs;
}

const OptionSpec* find_option(const std::string& name) {
  for (const auto& spec : option_schema())
    if (spec.name == name) return &spec;
  return nullptr;
}

std::string suggest_option(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& spec : option_schema()) names.push_back(spec.name);
  std::string best = closest_match(name, names);
  if (best.empty()) {
    // A leaf name given without (or under the wrong) group: `lr` -> `optimizer.lr`.
    std::string leaf = name.substr(name.rfind('.') + 1);
    for (const auto& candidate : names)
      if (candidate.substr(candidate.rfind('.') + 1) == leaf) best = candidate;
  }
  return best.empty() ? "" : cat(" (did you mean '", best, "'?)");
}

std::string type_name(OptionType type) {
  switch (type) {
    case OptionType::Bool: return "bool";
    case OptionType::Int: return "int";
    case OptionType::Float: return "float";
    case OptionType::String: return "string";
    case OptionType::StringList: return "list[string]";
    case OptionType::IntList: return "list[int]";
  }
  return "?";
}

std::string describe_constraint(const OptionSpec& spec) {
  if (!spec.choices.empty()) return "one of " + join(spec.choices, ", ");
  auto num = [](double v) { return trim(cat(v)); };
  if (spec.min && spec.max) return cat("in [", num(*spec.min), ", ", num(*spec.max), "]");
  if (spec.min) return cat(spec.min_exclusive ? "> " : ">= ", num(*spec.min));
  if (spec.max) return cat("<= ", num(*spec.max));
  return "";
}

}  // namespace areal
