// The generation ranks of asynchronous RL (separate generation and training ranks,
// async_rl.h). Each generation replica (t ranks, rollout.backend's shape) runs without
// pause:
//   - feeds its groups (its positions of each step's batch) to one continuous batch
//     (generate_stream): a finished answer's row goes at once to the next answer, while
//     the staleness rule (rollout.max_head_offpolicyness, rollout.queue_size,
//     async_queue.h) and rollout.max_concurrent_rollouts / D groups in flight allow;
//   - before every forward step looks for new weights and, when a version has come,
//     takes it in place, so answers in flight go on with the new weights (AReaL's
//     interruptible generation) and every token keeps the version that sampled it;
//   - scores a group the moment its last answer finishes (the reward function runs
//     here, never on the trainers) and posts it to its trainer;
//   - when the staleness rule holds everything back, waits for the next version.
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
#include "areal/rl/rl_inputs.h"

namespace areal {

// Collective over the generation ranks (`generators`); returns after the last version
// was taken and evaluated.
void run_generation(const Config& cfg, const RlInputs& inputs, const ModelConfig& model, const RankInfo& me,
                    const Allocation& allocation, Communicator& generators, Mailbox& mail);

}  // namespace areal
