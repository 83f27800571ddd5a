#include "areal/job/async_rl.h"

#include "areal/dist/mailbox.h"
#include "areal/job/startup.h"
#include "areal/rl/async_generation.h"
#include "areal/rl/rl_trainer.h"
#include "areal/util/log.h"
#include "areal/util/strings.h"

namespace areal {

std::string rank_role(const Allocation& a, int rank) {
  const int64_t g = a.generation_ranks();
  if (!a.separate) return "generates and trains";
  if (rank < g)
    return cat("generates (replica ", rank / a.rollout.tensor, ", tensor rank ", rank % a.rollout.tensor, " of ",
               a.rollout.tensor, ")");
  return cat("trains (FSDP rank ", rank - g, " of ", a.actor.ranks(), ")");
}

void run_async_rl(const Config& cfg, const RlInputs& inputs, const ModelConfig& model, const RankInfo& me,
                  const Allocation& a, Communicator& world) {
  const int generation_ranks = static_cast<int>(a.generation_ranks());
  const int trainers = static_cast<int>(a.actor.ranks());
  const bool trains = a.trains(me.rank);
  std::unique_ptr<Communicator> side = world.split(trains ? 1 : 0, me.rank);
  Mailbox mail;
  if (!trains) {
    run_generation(cfg, inputs, model, me, a, *side, mail);
    return;
  }
  // The trainers: the rank and world of the FSDP group.
  RankInfo trainer = me;
  trainer.rank = me.rank - generation_ranks;
  trainer.world_size = trainers;
  Trainer started = start_trainer(cfg, trainer, *side);
  GenerationLink link;
  link.mail = &mail;
  link.replicas = static_cast<int>(a.rollout.data);
  for (int g = 0; g < generation_ranks; ++g)
    if (g % trainers == trainer.rank) link.served.push_back(g);
  run_rl(cfg, inputs, trainer, *side, *started.policy, &link);
}

}  // namespace areal
