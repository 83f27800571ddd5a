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
//
// With separate generation ranks (asynchronous RL, async_rl.h) the trainers run the
// same loop, but the rollout comes from the queue (async_queue.h: groups generated and
// scored on the generation ranks, with the weight version of every token), the new
// weights go to the generation ranks after every step (weight_sync.h), and the
// held-out scores come from generation replica 0.
#pragma once

#include <string>

#include "areal/config/config.h"
#include "areal/dist/bootstrap.h"
#include "areal/dist/communicator.h"
#include "areal/dist/mailbox.h"
#include "areal/fsdp/policy.h"
#include "areal/rl/rl_inputs.h"

namespace areal {

struct RlSummary {
  int64_t steps = 0;
  double eval_before = -1;  // held-out greedy accuracy (share of reward > 0); -1: no valid_dataset
  double eval_after = -1;
  double first_reward = 0;  // mean raw reward of the first and the last step
  double last_reward = 0;
  std::string checkpoint;
};

// The trainers' end of asynchronous RL.
struct GenerationLink {
  Mailbox* mail = nullptr;
  std::vector<int> served;  // the generation ranks this trainer sends weights to
  int replicas = 1;         // generation replicas (each one's first rank sends groups)
};

// Collective. `inputs` from prepare_job. With `link`, `me` and `comm` are the training
// ranks' (rank and size among the trainers); without, every rank generates and trains.
RlSummary run_rl(const Config& cfg, const RlInputs& inputs, const RankInfo& me, Communicator& comm, Policy& policy,
                 const GenerationLink* link = nullptr);

}  // namespace areal
