// What an RL job reads besides the model: tokenizer, prompt template, sampling, the
// reward, the prompts and the schedule. job/job_inputs.h loads and checks them before
// the staged init.
#pragma once

#include <memory>

#include "areal/data/epoch_plan.h"
#include "areal/data/prompt_dataset.h"
#include "areal/reward/reward.h"
#include "areal/rollout/generation.h"
#include "areal/text/tokenizer.h"

namespace areal {

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

}  // namespace areal
