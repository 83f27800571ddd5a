// Asynchronous RL in one mpirun (AReaL's mode): when rollout.backend's ranks and
// actor.backend's add up to the world size, ranks [0, G) only generate and the other
// T ranks only train. The trainers run the staged init over themselves (the generation
// ranks never load the checkpoint: their weights come from the trainers, version 0
// first) and the RL loop with a GenerationLink; the generation ranks run
// run_generation. Both sides meet only through the mailbox (dist/mailbox.h): finished
// groups one way (async_queue.h), weights the other (rollout/weight_sync.h).
// docs/rl.md, "Asynchronous RL".
#pragma once

#include <string>

#include "areal/config/allocation.h"
#include "areal/config/config.h"
#include "areal/dist/bootstrap.h"
#include "areal/dist/communicator.h"
#include "areal/model/model_config.h"
#include "areal/job/job_inputs.h"

namespace areal {

// What world rank `rank` does, for the placement table: "generates (replica 0, tensor
// rank 1 of 2)" or "trains (FSDP rank 0 of 2)".
std::string rank_role(const Allocation& allocation, int rank);

// Collective over the world. Returns when both sides are done.
void run_async_rl(const Config& cfg, const RlInputs& inputs, const ModelConfig& model, const RankInfo& me,
                  const Allocation& allocation, Communicator& world);

}  // namespace areal
