// The RL loop (`--job rl`), one step:
//   rollout    every rank gathers the policy and samples gconfig.n_samples answers for
//              its share of the step's prompts (generation.h)
//   reward     the configured reward function against each prompt's reference
//   advantage  scores, optional KL penalty to the reference, GAE, group normalization
//              (advantages.h)
//   update     actor.ppo_n_minibatches PPO minibatch steps on the sharded engine, the
//              loss averaged over the minibatch's answer tokens of all ranks (ppo_loss.h)
//   stats      one line on rank 0, stats.jsonl, TensorBoard (stats_logger.h)
// plus greedy evaluation on valid_dataset before the first step, every
// evaluator.freq_steps and after the last, and a Hugging Face checkpoint at the end
// (and every saver.freq_steps).
#pragma once

#include <string>

#include "areal/config/config.h"
#include "areal/dist/bootstrap.h"
#include "areal/dist/communicator.h"
#include "areal/fsdp/policy.h"
#include "areal/rl/job_inputs.h"

namespace areal {

struct RlSummary {
  int64_t steps = 0;
  double eval_before = -1;  // held-out greedy accuracy (share of reward > 0); -1: no valid_dataset
  double eval_after = -1;
  double first_reward = 0;  // mean raw reward of the first and the last step
  double last_reward = 0;
  std::string checkpoint;
};

// Collective. `inputs` from prepare_job.
RlSummary run_rl(const Config& cfg, const RlInputs& inputs, const RankInfo& me, Communicator& comm, Policy& policy);

}  // namespace areal
