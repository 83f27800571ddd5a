#include "areal/job/startup.h"

#include "areal/config/run_paths.h"
#include "areal/util/log.h"

namespace areal {

Trainer start_trainer(const Config& cfg, const RankInfo& me, Communicator& comm) {
  Trainer trainer;
  trainer.init = staged_init(cfg, me, comm);
  const InitReport report = gather_init_report(trainer.init, comm);
  if (me.rank == 0) {
    log::info(format_init_table(report));
    log::info("stage figures written to " + write_run_file(cfg, "init_stages.json", init_report_json(report)));
  }
  trainer.policy = std::make_unique<Policy>(cfg, *trainer.init.model, comm);
  return trainer;
}

}  // namespace areal
