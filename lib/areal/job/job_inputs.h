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
#include "areal/dist/bootstrap.h"
#include "areal/model/model_config.h"
#include "areal/rl/rl_inputs.h"
#include "areal/sft/sft_inputs.h"

namespace areal {

struct JobInputs {
  std::optional<RlInputs> rl;    // job=rl
  std::optional<SftInputs> sft;  // job=sft
  std::optional<RlInputs> eval;  // job=eval: no train set; valid_dataset is what it evaluates
};

// The model's tokenizer (tokenizer_path, else model_path's tokenizer.json, else the
// byte tokenizer), checked against the model's vocabulary.
std::unique_ptr<Tokenizer> model_tokenizer(const Config& cfg, const ModelConfig& model);
// The chat_template option resolved for that tokenizer (its folder holds the model's own
// template), with enable_thinking.
PromptTemplate chat_template_for(const Config& cfg, const Tokenizer& tokenizer);

// The split a dataset folder is read at: the option's, else AReaL's for the role
// (`train` for train_dataset, `test` for valid_dataset).
std::string split_of(const DatasetConfig& dataset, const std::string& role_default);

// Loads and checks the inputs of cfg.job (nothing for job=init beyond the model's
// options). `model` is the config.json the init will build (init_model_config).
JobInputs prepare_job(const Config& cfg, const RankInfo& me, const ModelConfig& model);

}  // namespace areal
