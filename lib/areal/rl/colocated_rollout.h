// The colocated shape's rollout (rollout_source.h): every rank generates and trains.
// Generation runs in groups of t consecutive ranks (rollout.backend's tensor-parallel
// size) that generate their members' prompts together from the FSDP shards; a rank's
// prompts are every world_size-th of the step's batch. Answers are scored here
// (reward_fn); with DAPO's refill (actor.dynamic_sampling, dynamic_bs false) more
// rounds are generated until batch_size groups of all ranks carry a signal
// (batch_refill.h). Greedy evaluation on valid_dataset runs here too.
#pragma once

#include <memory>

#include "areal/config/config.h"
#include "areal/dist/bootstrap.h"
#include "areal/dist/communicator.h"
#include "areal/fsdp/policy.h"
#include "areal/rl/rl_inputs.h"
#include "areal/rl/rollout_source.h"

namespace areal {

// Collective over `comm` (the generation groups are split from it).
std::unique_ptr<RolloutSource> make_colocated_rollout(const Config& cfg, const RlInputs& inputs, const RankInfo& me,
                                                      Communicator& comm, Policy& policy);

}  // namespace areal
