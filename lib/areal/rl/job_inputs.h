// What a training job needs besides the model, loaded and checked right after
// bootstrap and before the staged init: every check that the config, the world size
// and the model's config.json decide (tokenizer and dataset files, chat template,
// reward function, LoRA target modules, batch shapes against the world size, the
// memory a rollout needs). For a 70 B model a typo then costs a second, not the
// minutes of loading. Every such failure is a ConfigError: exit 2 on every rank,
// printed once.
#pragma once

#include <memory>
#include <optional>

#include "areal/config/config.h"
#include "areal/data/epoch_plan.h"
#include "areal/dist/bootstrap.h"
#include "areal/model/model_config.h"
#include "areal/rollout/generation.h"
#include "areal/data/prompt_dataset.h"
#include "areal/rl/reward.h"
#include "areal/data/text_dataset.h"
#include "areal/text/tokenizer.h"

namespace areal {

// The epochs and steps of a run: the shape of every epoch and how many steps in all.
struct TrainingSchedule {
  EpochSpec epochs;
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;  // over all epochs, capped by total_train_steps
};

struct RlInputs {
  std::unique_ptr<Tokenizer> tokenizer;
  PromptTemplate tmpl;
  SamplingParams sampling;
  std::unique_ptr<Rewarder> reward;  // a command's workers are started here, before the init;
                                     // none on the trainers of asynchronous RL
  std::unique_ptr<PromptDataset> train;
  std::unique_ptr<PromptDataset> valid;  // null: no held-out evaluation
  TrainingSchedule schedule;
};

struct SftInputs {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<TextDataset> train;
  std::unique_ptr<TextDataset> valid;  // valid_dataset.path, when given: the held-out loss
  TrainingSchedule schedule;
};

struct JobInputs {
  std::optional<RlInputs> rl;    // job=rl
  std::optional<SftInputs> sft;  // job=sft
};

// The most tokens a prompt of `data` has (the memory checks, the generation stream's rows).
int64_t longest_prompt(const PromptDataset& data);

// Loads and checks the inputs of cfg.job (nothing for job=init beyond the model's
// options). `model` is the config.json the init will build (init_model_config).
JobInputs prepare_job(const Config& cfg, const RankInfo& me, const ModelConfig& model);

}  // namespace areal
