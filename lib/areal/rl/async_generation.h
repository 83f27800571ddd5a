// The generation ranks of asynchronous RL (separate generation and training ranks,
// async_rl.h). Each generation replica (t ranks, rollout.backend's shape) runs without
// pause:
//   - takes the next groups it may start (its positions of each step's batch, at most
//     rollout.max_concurrent_rollouts / D at once, within the staleness rule of
//     rollout.max_head_offpolicyness and rollout.queue_size, async_queue.h);
//   - generates them in one continuous batch; before every forward step it looks for
//     new weights and, when a version has come, takes it in place, so answers in flight
//     go on with the new weights (AReaL's interruptible generation) and every token
//     keeps the version that sampled it;
//   - scores them (the reward function runs here, never on the trainers) and posts
//     each group to its trainer;
//   - when the staleness rule holds it back, waits for the next version.
// Replica 0 also evaluates on valid_dataset (before training, every
// evaluator.freq_steps / freq_epochs, after the last step) and sends the scores to the
// first trainer.
#pragma once

#include "areal/config/allocation.h"
#include "areal/config/config.h"
#include "areal/dist/bootstrap.h"
#include "areal/dist/communicator.h"
#include "areal/dist/mailbox.h"
#include "areal/model/model_config.h"
#include "areal/rl/job_inputs.h"

namespace areal {

// Collective over the generation ranks (`generators`); returns after the last version
// was taken and evaluated.
void run_generation(const Config& cfg, const RlInputs& inputs, const ModelConfig& model, const RankInfo& me,
                    const Allocation& allocation, Communicator& generators, Mailbox& mail);

}  // namespace areal
