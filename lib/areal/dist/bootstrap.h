// Rank bootstrap: MPI (under mpirun, srun, or as a singleton), who is who on
// which host, and which device each rank computes on.
#pragma once

#include <string>

#include "areal/config/config.h"

namespace areal {

struct RankInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // index among the ranks on this host
  int local_world_size = 1;  // ranks on this host (MPI shared-memory split)
  std::string host;
  std::string device;        // "cpu" or "cuda:<local_rank>"
};

// Initializes MPI and picks the device from cfg.device. Call once, after the config
// is validated. Throws ConfigError when the config disagrees with the job
// (allocation_mode vs world size, device=cuda without GPUs).
RankInfo bootstrap(const Config& cfg);

// One line per rank (rank, host, local rank, device), gathered to rank 0.
// Collective: every rank calls it; rank 0 gets the text, the others "".
std::string placement_table(const RankInfo& me);

// Ends MPI cleanly (all ranks must call it).
void finalize();

// Ends the whole job from one rank: MPI_Abort when MPI is running (the launcher
// then stops every rank), else std::exit.
[[noreturn]] void abort_job(int exit_code);

// NCCL's version when NCCL support is compiled in, else "not compiled in".
std::string nccl_version();

}  // namespace areal
