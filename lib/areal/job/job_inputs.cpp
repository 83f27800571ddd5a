#include "areal/job/job_inputs.h"

#include <algorithm>
#include <memory>

#include "areal/fsdp/policy.h"
#include "areal/fsdp/training_memory.h"
#include "areal/rollout/generation.h"
#include "areal/util/memory.h"
#include "areal/config/allocation.h"
#include "areal/rollout/rollout_model.h"
#include "areal/text/stop_strings.h"
#include "areal/recover/run_recovery.h"
#include "areal/util/error.h"
#include "areal/util/log.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

// Runs `load`; a failure to read what an option names (a missing file, a bad row)
// becomes a ConfigError naming the option.
template <typename Load>
auto loaded_for(const std::string& option, Load&& load) {
  try {
    return load();
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    throw ConfigError(cat("option '", option, "': ", e.what()));
  }
}

// `trainers`: the ranks that train (the world, or actor.backend's with separate
// generation ranks), or with tensor or context parallelism the groups of `sharing`
// ranks that share rows.
void check_batch_size(const Config& cfg, int trainers, const char* per_rank_work, int64_t sharing = 1) {
  const int64_t batch_size = cfg.train_dataset.batch_size;
  if (batch_size % trainers != 0)
    throw ConfigError(cat("option 'train_dataset.batch_size' = ", batch_size, " must be a multiple of the ",
                          sharing > 1 ? cat("data-parallel groups of actor.backend (", trainers, " groups of ", sharing,
                                            " ranks): every group ")
                                      : cat("training ranks (", trainers, "): every rank "),
                          per_rank_work, " batch_size / ", trainers, " rows"));
}

TrainingSchedule training_schedule(const Config& cfg, int trainers, size_t rows, const char* what) {
  const DatasetConfig& td = cfg.train_dataset;
  TrainingSchedule s;
  s.epochs = {rows, td.batch_size, td.drop_last, td.shuffle, cfg.seed, trainers};
  s.steps_per_epoch = batches_per_epoch(s.epochs);
  if (s.steps_per_epoch == 0)
    throw ConfigError(cat("option 'train_dataset.path': ", td.path, " has ", rows, " usable ", what,
                          ", fewer than one batch of ", td.batch_size,
                          td.drop_last ? " (train_dataset.drop_last is true)" : cat(" for ", trainers, " ranks")));
  if (const size_t left_out = plan_epoch(s.epochs, 0).left_out; left_out > 0)
    log::info(cat("each epoch leaves out ", left_out, " of its ", rows, " ", what,
                  td.drop_last ? " (the last, partial batch: train_dataset.drop_last is true)"
                               : " so that every rank gets the same number in the last, partial batch"));
  s.total_steps = s.steps_per_epoch * cfg.total_train_epochs;
  if (cfg.total_train_steps > 0) s.total_steps = std::min(s.total_steps, cfg.total_train_steps);
  return s;
}

// The fewest rows a batch of the epoch has (the last one, when partial and kept).
size_t smallest_batch(const EpochSpec& spec) {
  size_t smallest = static_cast<size_t>(spec.batch_size);
  for (const auto& batch : plan_epoch(spec, 0).batches) smallest = std::min(smallest, batch.size());
  return smallest;
}

// Multi-turn episodes: the context an episode may fill (gconfig.max_tokens, at most the
// model's positions), the template's message tokens checked now, and the environment on
// the first rank of each generation group of `t` (it decides for the group).
void prepare_episodes(const Config& cfg, const RankInfo& me, const ModelConfig& model, int64_t t, bool generates,
                      RlInputs& in) {
  int64_t context = cfg.gconfig.max_tokens;
  if (model.max_position_embeddings > 0 && model.rope_scaling.type != "dynamic")
    context = std::min(context, model.max_position_embeddings);
  const int64_t longest =
      std::max(in.train ? longest_prompt(*in.train) : 0, in.valid ? longest_prompt(*in.valid) : 0);
  if (longest + 2 > context)
    throw ConfigError(cat("the longest prompt (", longest, " tokens) leaves no room for an episode in ", context,
                          " tokens (gconfig.max_tokens, at most the model's max_position_embeddings)"));
  in.sampling.max_tokens = context;
  in.episodes = {cfg.agent_run_args.max_turns, cfg.agent_run_args.turn_discount, context};
  try {
    message_tokens(in.tmpl, *in.tokenizer, "tool", "1", false);
  } catch (const std::runtime_error& e) {
    throw ConfigError(cat("option 'chat_template': ", e.what()));
  }
  if (generates && me.rank % t == 0) in.env = make_environment(cfg.env, *in.reward, cfg.env_workers, cfg.env_timeout);
}

// What every job that generates reads: the tokenizer, the template, the sampling
// (gconfig, its stop strings) and, on the ranks that score (`generates`), the reward.
RlInputs generation_inputs(const Config& cfg, const ModelConfig& model, bool generates) {
  RlInputs in;
  in.tokenizer = model_tokenizer(cfg, model);
  in.tmpl = chat_template_for(cfg, *in.tokenizer);
  std::vector<int64_t> stop_ids = {in.tokenizer->eos_id()};
  stop_ids.insert(stop_ids.end(), in.tmpl.stop_ids.begin(), in.tmpl.stop_ids.end());
  in.sampling = sampling_params(cfg.gconfig, stop_ids, in.tokenizer->pad_id());
  in.sampling.max_rows = cfg.rollout.max_running_requests;
  in.episodic = cfg.agent_run_args.max_turns > 1 || !cfg.env.empty();
  if (!cfg.gconfig.stop.empty()) {  // the tokenizer lives in `in` as long as the sampling does
    auto stops = std::make_shared<StopStrings>(cfg.gconfig.stop, *in.tokenizer);
    in.sampling.stop_check = [stops](const std::vector<int64_t>& answer, size_t turn_start) {
      return stops->completed_by_last_token(answer, turn_start);
    };
  }
  if (generates) in.reward = std::make_unique<Rewarder>(cfg.reward_fn, cfg.reward_workers, cfg.reward_timeout);
  return in;
}

// Only a command (reward_fn or env) sees a row's other fields: otherwise they are not kept.
bool keeps_rows(const Config& cfg) { return starts_with(cfg.reward_fn, "command:") || starts_with(cfg.env, "command:"); }

std::unique_ptr<PromptDataset> load_valid(const Config& cfg, const RlInputs& in) {
  const DatasetConfig& vd = cfg.valid_dataset;
  return loaded_for("valid_dataset.path", [&] {
    return std::make_unique<PromptDataset>(vd.path, vd.prompt_key, vd.answer_key, vd.max_length, *in.tokenizer, in.tmpl,
                                           split_of(vd, "test"), keeps_rows(cfg));
  });
}

// A prompt and its answer must fit the model's max_position_embeddings (rotary
// positions past it were never trained; nothing would say so).
void check_positions(const ModelConfig& model, const RlInputs& in, const PromptDataset& data, const std::string& option) {
  const int64_t longest = longest_prompt(data), needed = longest + in.sampling.max_new_tokens;
  // Dynamic NTK rope is made to reach past it.
  if (model.max_position_embeddings > 0 && needed > model.max_position_embeddings &&
      model.rope_scaling.type != "dynamic")
    throw ConfigError(cat("the longest prompt of ", option, " (", longest, " tokens) plus gconfig.max_new_tokens (",
                          in.sampling.max_new_tokens, ") is ", needed, " positions, more than the model's ",
                          "max_position_embeddings (", model.max_position_embeddings,
                          "): lower gconfig.max_new_tokens or set ", option.substr(0, option.find('.')),
                          ".max_length"));
}

// The rollout's memory for `rows` answers at once to the prompts of `data`: a bound for
// every step, known now. An episode's row holds its prompt and every turn, up to
// gconfig.max_tokens.
// Refuses a training shape whose micro-batch cannot fit a rank's free memory (a lower
// bound, fsdp/training_memory.h): the longest sequence, `rows` of it padded into one
// micro-batch (or actor.mb_spec.max_tokens_per_mb tokens packed), its chunk with context
// parallelism, its heads, channels and vocabulary with tensor parallelism.
void check_training_memory(const Config& cfg, const RankInfo& me, const ModelConfig& model, int64_t longest,
                           int64_t rows, int64_t context, int64_t tensor) {
  const int64_t budget = cfg.actor.mb_spec.max_tokens_per_mb;
  const int64_t padded = (longest + context - 1) / context * context;
  TrainingShape shape;
  shape.world = me.world_size;
  shape.tokens = (budget > 0 ? std::max(budget, longest) : rows * padded) / context;
  shape.tensor = tensor;
  shape.dtype = dtype_from_name(cfg.actor.dtype);
  shape.checkpointing = cfg.actor.gradient_checkpointing;
  shape.lora = cfg.actor.use_lora;
  const int64_t need = training_memory_bytes(model, model.num_parameters(), largest_unit_parameters(model), shape);
  const int64_t free = free_memory_bytes(at::Device(me.device));
  if (free > 0 && need > free)
    throw ConfigError(cat("training needs at least ", format_bytes(need), " per rank on ", me.device, " (shards of ",
                          model.num_parameters(), " parameters over ", me.world_size, " ranks, ", shape.tokens,
                          " tokens of activations and logits per micro-batch: the longest sequence has ", longest,
                          context > 1 ? cat(", split over ", context, " ranks") : std::string(), ") but only ",
                          format_bytes(free), " is free; lower actor.mb_spec.max_tokens_per_mb, "
                          "train_dataset.batch_size or train_dataset.max_length, set actor.gradient_checkpointing true, "
                          "or split the sequences over more ranks (actor.backend: fsdp:dDcC or fsdp:dDtT, "
                          "docs/training.md)"));
}

void check_generation_memory(const Config& cfg, const RankInfo& me, const ModelConfig& model, const RlInputs& in,
                             const PromptDataset& data, int64_t rows, int64_t t) {
  const int64_t longest = longest_prompt(data);
  const int64_t answer_room = in.episodic ? in.sampling.max_tokens - longest : in.sampling.max_new_tokens;
  // At most rollout.max_running_requests answers at once.
  const int64_t at_once = in.sampling.max_rows > 0 ? std::min(rows, in.sampling.max_rows) : rows;
  check_rollout_memory(model, model.num_parameters(), dtype_from_name(cfg.actor.dtype), at_once, longest, answer_room,
                       t, at::Device(me.device));
}

RlInputs prepare_rl(const Config& cfg, const RankInfo& me, const ModelConfig& model) {
  const ActorConfig& actor = cfg.actor;
  const Allocation allocation = allocation_for_world(cfg, me.world_size);
  // Trainers of asynchronous RL score nothing (the generation ranks do): no workers.
  const bool generates = !allocation.separate || !allocation.trains(me.rank);
  RlInputs in = generation_inputs(cfg, model, generates);
  in.sampling.record_experts = model.num_experts > 0;  // moe_route_agreement, actor.router_replay

  const DatasetConfig& td = cfg.train_dataset;
  in.train = loaded_for("train_dataset.path", [&] {
    return std::make_unique<PromptDataset>(td.path, td.prompt_key, td.answer_key, td.max_length, *in.tokenizer, in.tmpl,
                                           split_of(td, "train"), keeps_rows(cfg));
  });
  if (in.train->skipped() > 0) log::warn(cat(in.train->skipped(), " prompts longer than train_dataset.max_length skipped"));
  if (!cfg.valid_dataset.path.empty()) in.valid = load_valid(cfg, in);

  // With tensor or context parallelism the t x c ranks of a group share their prompts.
  const int trainers = (allocation.separate ? static_cast<int>(allocation.actor.ranks()) : me.world_size) /
                       static_cast<int>(allocation.actor.sharing());
  check_batch_size(cfg, trainers, "trains on", allocation.actor.sharing());
  in.schedule = training_schedule(cfg, trainers, in.train->size(), "prompts");
  const int64_t smallest = static_cast<int64_t>(smallest_batch(in.schedule.epochs));
  if (allocation.separate && actor.dynamic_sampling && !cfg.dynamic_bs)
    throw ConfigError("options 'actor.dynamic_sampling' with 'dynamic_bs' = false refill the batch by generating "
                      "more, which asynchronous RL (separate generation ranks) does not do: it trains on the groups "
                      "that stay; set dynamic_bs: true");
  // Asynchronous RL numbers the groups of the run by steps of batch_size.
  if (allocation.separate && smallest != td.batch_size)
    throw ConfigError(cat("option 'train_dataset.drop_last' = false leaves a partial last batch of ", smallest,
                          " prompts, which asynchronous RL (separate generation ranks) cannot number; set it true"));
  const int64_t fewest_rows = smallest / trainers * cfg.gconfig.n_samples;
  if (fewest_rows < actor.ppo_n_minibatches)
    throw ConfigError(cat("option 'actor.ppo_n_minibatches' = ", actor.ppo_n_minibatches, " is more than the ",
                          fewest_rows, " answers each rank has in ",
                          smallest == td.batch_size
                              ? "a step (batch_size / world_size * n_samples)"
                              : "the last, partial batch of an epoch (set train_dataset.drop_last true to drop it)"));

  check_positions(model, in, *in.train, "train_dataset.path");
  if (in.valid) check_positions(model, in, *in.valid, "valid_dataset.path");

  // Tensor-parallel generation splits the heads and the MLP evenly.
  const int64_t t = allocation.tensor_parallel();
  check_tensor_parallel(model, t, allocation.rollout.expert > 1);

  if (in.episodic) prepare_episodes(cfg, me, model, t, generates, in);

  // Colocated: every rank generates its share of a step; separate: a replica generates
  // rollout.max_concurrent_rollouts / D groups at once, and the trainers generate nothing.
  // A generation group generates its t ranks' answers together.
  const int64_t per_rank = (td.batch_size + trainers - 1) / trainers * cfg.gconfig.n_samples;
  const RolloutConfig& rc = cfg.rollout;
  const int64_t per_replica =
      ((rc.max_concurrent_rollouts > 0 ? rc.max_concurrent_rollouts : td.batch_size) + allocation.rollout.data - 1) /
      allocation.rollout.data * cfg.gconfig.n_samples;
  if (generates) {
    check_generation_memory(cfg, me, model, in, *in.train, allocation.separate ? per_replica : t * per_rank, t);
    if (in.valid) check_generation_memory(cfg, me, model, in, *in.valid, cfg.valid_dataset.batch_size, t);
  }
  return in;
}

// job=eval: the generation inputs and valid_dataset, every prompt with a reference for
// a built-in reward to compare against.
RlInputs prepare_eval(const Config& cfg, const RankInfo& me, const ModelConfig& model) {
  RlInputs in = generation_inputs(cfg, model, true);
  in.valid = load_valid(cfg, in);
  const PromptDataset& data = *in.valid;
  if (data.size() == 0)
    throw ConfigError(cat("option 'valid_dataset.path': ", cfg.valid_dataset.path, " has no prompt to evaluate on"));
  if (!starts_with(cfg.reward_fn, "command:") && !in.episodic)  // a command may read any field of the row
    for (size_t i = 0; i < data.size(); ++i)
      if (trim(data.shared(i)->example.answer).empty())
        throw ConfigError(cat("option 'valid_dataset.path': row ", i, " of ", cfg.valid_dataset.path, " has no '",
                              cfg.valid_dataset.answer_key, "' for reward_fn '", cfg.reward_fn,
                              "' to compare against (valid_dataset.answer_key names the field)"));
  check_positions(model, in, data, "valid_dataset.path");
  const Allocation allocation = allocation_for_world(cfg, me.world_size);
  const int64_t t = allocation.tensor_parallel();
  check_tensor_parallel(model, t, allocation.rollout.expert > 1);
  if (in.episodic) prepare_episodes(cfg, me, model, t, true, in);
  // A group generates its t ranks' chunks of valid_dataset.batch_size prompts together.
  check_generation_memory(cfg, me, model, in, data, t * cfg.valid_dataset.batch_size * cfg.gconfig.n_samples, t);
  return in;
}

SftInputs prepare_sft(const Config& cfg, const RankInfo& me, const ModelConfig& model) {
  SftInputs in;
  in.tokenizer = model_tokenizer(cfg, model);
  const PromptTemplate tmpl = chat_template_for(cfg, *in.tokenizer);
  const DatasetConfig& td = cfg.train_dataset;
  in.train = loaded_for("train_dataset.path", [&] {
    return std::make_unique<TextDataset>(td.path, td.prompt_key, td.answer_key, td.max_length, *in.tokenizer, tmpl,
                                         split_of(td, "train"));
  });
  if (in.train->skipped() > 0) log::warn(cat(in.train->skipped(), " sequences longer than train_dataset.max_length skipped"));
  if (!cfg.valid_dataset.path.empty()) {
    const DatasetConfig& vd = cfg.valid_dataset;
    in.valid = loaded_for("valid_dataset.path", [&] {
      return std::make_unique<TextDataset>(vd.path, vd.prompt_key, vd.answer_key, vd.max_length, *in.tokenizer, tmpl,
                                           split_of(vd, "test"));
    });
    if (in.valid->size() == 0)
      throw ConfigError(cat("option 'valid_dataset.path': ", vd.path, " has no sequence to evaluate on"));
  }
  // Tensor and context parallelism: the t x c ranks of a group share their rows, so the
  // rows go to the groups.
  const EngineShape mesh = allocation_for_world(cfg, me.world_size).actor;
  const int groups = me.world_size / static_cast<int>(mesh.sharing());
  check_batch_size(cfg, groups, "trains on", mesh.sharing());
  in.schedule = training_schedule(cfg, groups, in.train->size(), "sequences");
  check_training_memory(cfg, me, model, in.train->longest(), td.batch_size / groups, mesh.context, mesh.tensor);
  return in;
}

}  // namespace

std::unique_ptr<Tokenizer> model_tokenizer(const Config& cfg, const ModelConfig& model) {
  auto tokenizer = loaded_for("tokenizer_path", [&] {
    return load_tokenizer(cfg.tokenizer_path, cfg.init_from_scratch ? "" : cfg.model_path);
  });
  if (tokenizer->vocab_size() > model.vocab_size)
    throw ConfigError(cat("the tokenizer has ", tokenizer->vocab_size(), " tokens but the model's vocab_size is ",
                          model.vocab_size, " (tokenizer_path names another tokenizer; `byte` is the byte-level one)"));
  return tokenizer;
}

std::string split_of(const DatasetConfig& dataset, const std::string& role_default) {
  return dataset.split.empty() ? role_default : dataset.split;
}

PromptTemplate chat_template_for(const Config& cfg, const Tokenizer& tokenizer) {
  const std::string folder = tokenizer_folder(cfg.tokenizer_path, cfg.init_from_scratch ? "" : cfg.model_path);
  return loaded_for("chat_template", [&] { return prompt_template(cfg.chat_template, tokenizer, folder, cfg.enable_thinking); });
}

JobInputs prepare_job(const Config& cfg, const RankInfo& me, const ModelConfig& model) {
  check_policy_options(cfg);
  check_policy_model(cfg, model);
  const bool separate = allocation_for_world(cfg, me.world_size).separate;
  if (separate && cfg.job != "rl")
    throw ConfigError(cat("options 'rollout.backend' + 'actor.backend' give separate generation ranks, which only "
                          "job=rl uses (asynchronous RL); job=", cfg.job, " needs shapes that cover every rank"));
  if (separate && allocation_for_world(cfg, me.world_size).actor.sharing() > 1)
    throw ConfigError("option 'actor.backend': tensor and context parallelism (t, c) are not built with separate "
                      "generation ranks (asynchronous RL)");
  if (separate && cfg.evaluator.n_samples > 0)
    throw ConfigError(cat("option 'evaluator.n_samples' = ", cfg.evaluator.n_samples, ": sampled evaluation is "
                          "built for colocated RL only; with separate generation ranks the held-out score is the "
                          "greedy accuracy (set evaluator.n_samples 0, or run --job eval on a saved checkpoint)"));
  JobInputs inputs;
  if (cfg.job == "rl") inputs.rl = prepare_rl(cfg, me, model);
  if (cfg.job == "sft") inputs.sft = prepare_sft(cfg, me, model);
  if (cfg.job == "eval") inputs.eval = prepare_eval(cfg, me, model);
  if (cfg.job == "rl" || cfg.job == "sft") find_resume_point(cfg);  // its errors, before the load
  return inputs;
}

}  // namespace areal
