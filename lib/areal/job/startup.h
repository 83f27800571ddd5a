// The startup of every training rank, in one place: the staged init of the model's
// shards (DESIGN.md "Staged init"), its stage table on the job's first trainer and in
// <run dir>/init_stages.json, then the Policy over the shards (fsdp/policy.h, its
// engine built from the config by make_engine). Used by --job init/sft/rl and by the
// trainers of asynchronous RL.
#pragma once

#include <memory>

#include "areal/config/config.h"
#include "areal/dist/bootstrap.h"
#include "areal/dist/communicator.h"
#include "areal/fsdp/policy.h"
#include "areal/fsdp/staged_init.h"

namespace areal {

struct Trainer {
  InitResult init;                 // the shards and the figures of their init
  std::unique_ptr<Policy> policy;  // over init.model
};

// `me` and `comm`: the training ranks (the world, or actor.backend's ranks with separate
// generation ranks). Collective over `comm`.
Trainer start_trainer(const Config& cfg, const RankInfo& me, Communicator& comm);

}  // namespace areal
