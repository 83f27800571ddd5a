// The RL loop (`--job rl`): one step is its stages (docs/architecture.md):
//   rollout     this rank's answers to its share of the step's prompts, scored, with
//               DAPO's refill (rollout_source.h: colocated_rollout.h generates them,
//               async_rollout.h takes them from the generation ranks' queue)
//   advantages  scores, DAPO's filter, recomputed log-probs, KL to the reference,
//               normalized advantages (ppo_update.h, advantages.h)
//   update      actor.ppo_n_minibatches PPO minibatch steps on the sharded engine, each
//               loss over the minibatch's answer tokens of all ranks (ppo_update.h)
//   report      named statistics over all ranks: one line on rank 0, stats.jsonl,
//               TensorBoard (step_report.h)
//   then the held-out evaluation when due, periodic saves and the recover checkpoint,
// and a Hugging Face checkpoint at the end.
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
