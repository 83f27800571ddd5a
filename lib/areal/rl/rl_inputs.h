// What an RL job reads besides the model: tokenizer, prompt template, sampling, the
// reward, the prompts and the schedule. job/job_inputs.h loads and checks them before
// the staged init.
#pragma once

#include <memory>

#include "areal/data/epoch_plan.h"
#include "areal/data/prompt_dataset.h"
#include "areal/reward/environment.h"
#include "areal/reward/reward.h"
#include "areal/rl/episodes.h"
#include "areal/rollout/generation.h"
#include "areal/text/tokenizer.h"

namespace areal {

struct RlInputs {
  std::unique_ptr<Tokenizer> tokenizer;
  PromptTemplate tmpl;
  SamplingParams sampling;
  std::unique_ptr<Rewarder> reward;  // a command's workers are started here, before the init;
                                     // none on the trainers of asynchronous RL
  // Multi-turn episodes (agent_run_args.max_turns > 1 or an env): their limits, and the
  // environment on the first rank of each generation group (null elsewhere).
  bool episodic = false;
  EpisodeSettings episodes;
  std::unique_ptr<Environment> env;
  std::unique_ptr<PromptDataset> train;
  std::unique_ptr<PromptDataset> valid;  // null: no held-out evaluation
  TrainingSchedule schedule;
};

}  // namespace areal
