// areal-train: parse -> validate -> bootstrap -> run the job -> exit code.
// Logic lives in lib/areal; this file only wires it together.
#include <chrono>
#include <iostream>
#include <thread>

#include "areal/config/allocation.h"
#include "areal/config/areal_compat.h"
#include "areal/config/cli.h"
#include "areal/config/emit.h"
#include "areal/config/loader.h"
#include "areal/config/run_paths.h"
#include "areal/config/validate.h"
#include "areal/dist/bootstrap.h"
#include "areal/dist/communicator.h"
#include "areal/fsdp/staged_init.h"
#include "areal/job/startup.h"
#include "areal/job/async_rl.h"
#include "areal/job/job_inputs.h"
#include "areal/job/preview.h"
#include "areal/rl/eval_job.h"
#include "areal/rl/rl_trainer.h"
#include "areal/sft/sft_trainer.h"
#include "areal/util/error.h"
#include "areal/util/log.h"
#include "areal/util/memory.h"

namespace {

// Parses and validates the command line and config. Returns an exit code when the
// program is done (help, --print-config, errors), or -1 to go on and run the job.
int prepare(int argc, char** argv, areal::Config& cfg, bool is_rank0) {
  try {
    areal::CommandLine cli = areal::parse_command_line(argc, argv);
    if (cli.help || cli.cli_reference) {
      if (is_rank0) std::cout << (cli.help ? cli.help_text : areal::cli_reference_markdown());
      return areal::kExitOk;
    }
    cfg = areal::load_config(cli.config_path, cli.overrides);
    areal::log::parse_level(cfg.log.level);
    areal::validate_config(cfg);
    if (is_rank0 && !cfg.ignored_keys.empty())
      areal::log::warn(areal::cat("ignoring ", cfg.ignored_keys.size(), " AReaL key(s) that areal-train does "
                                  "differently (docs/configuration.md): ",
                                  areal::ignored_keys_summary(cfg.ignored_keys)));
    if (is_rank0)
      for (const std::string& warning : areal::config_warnings(cfg)) areal::log::warn(warning);
    if (cli.print_config) {
      if (is_rank0) std::cout << areal::config_to_yaml(cfg);
      return areal::kExitOk;
    }
    if (cfg.job == "preview") {  // no collectives: rank 0 shows, the others are done
      if (is_rank0) areal::run_preview(cfg, std::cout);
      return areal::kExitOk;
    }
    return -1;
  } catch (const areal::ConfigError& e) {
    // Every rank parses the same input and fails alike: rank 0 speaks for all. The
    // others give it time to write first: a launcher that sees a rank exit non-zero kills
    // the rest at once (SIGTERM, or SIGKILL), which could take rank 0 before its message.
    // When rank 0 exits first, the launcher ends this wait; a rank still here after it
    // failed alone (a file its node lacks) and says so itself.
    if (!is_rank0) std::this_thread::sleep_for(std::chrono::seconds(2));
    areal::log::error(e.what());
    return areal::kExitConfigError;
  }
}

int run_job(const areal::Config& cfg) {
  areal::RankInfo me = areal::bootstrap(cfg);
  areal::log::configure(me.rank, me.world_size, cfg.log.level, cfg.log.all_ranks);
  areal::log::info(areal::cat("bootstrap: world_size=", me.world_size, ", NCCL ", areal::nccl_version()));
  const areal::Allocation allocation = areal::allocation_for_world(cfg, me.world_size);
  areal::log::info(areal::describe_allocation(allocation));
  std::string placement = areal::placement_table(me, areal::rank_role(allocation, me.rank));
  areal::log::info("placement:" + placement);
  // With separate generation ranks the first trainer speaks for the job.
  areal::log::configure(me.rank, me.world_size, cfg.log.level, cfg.log.all_ranks,
                        static_cast<int>(allocation.generation_ranks()));
  {
    // Everything the config, the world size and config.json decide is checked before
    // the (possibly long) load.
    // Some of them read node-local things (paths, reward commands): a failure on any rank
    // is raised on all, so no rank goes on into a collective that others never reach.
    areal::ModelConfig model;
    areal::JobInputs inputs;
    areal::check_on_every_rank(me, [&] {
      model = areal::init_model_config(cfg);
      inputs = areal::prepare_job(cfg, me, model);
    });
    areal::Communicator comm(me, cfg.cluster.collective_timeout);
    if (allocation.separate) {  // asynchronous RL (prepare_job refuses other jobs)
      areal::run_async_rl(cfg, *inputs.rl, model, me, allocation, comm);
    } else {
      areal::Trainer trainer = areal::start_trainer(cfg, me, comm);
      if (inputs.sft) areal::run_sft(cfg, *inputs.sft, me, comm, *trainer.policy);
      if (inputs.rl) areal::run_rl(cfg, *inputs.rl, me, comm, *trainer.policy);
      if (inputs.eval) areal::run_eval(cfg, *inputs.eval, me, comm, *trainer.policy);
    }
  }
  areal::finalize();
  return areal::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  areal::keep_freed_host_memory();
  const areal::log::LauncherRank launcher = areal::log::launcher_rank();
  const bool is_rank0 = launcher.rank == 0;
  areal::log::configure(launcher.rank, launcher.world_size, "info", false);

  areal::Config cfg;
  if (int code = prepare(argc, argv, cfg, is_rank0); code >= 0) return code;
  areal::log::configure(launcher.rank, launcher.world_size, cfg.log.level, cfg.log.all_ranks);

  return areal::run_guarded([&] { return run_job(cfg); });
}
