// Rank bootstrap: MPI (under mpirun, srun, or as a singleton), who is who on
// which host, and which device each rank computes on.
#pragma once

#include <functional>
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
// (rollout.backend / actor.backend / allocation_mode vs world size, device=cuda
// without GPUs).
RankInfo bootstrap(const Config& cfg);

// Runs `checks` on every rank; a ConfigError that any rank raises (a path, module or
// tokenizer that exists on some nodes only) is then raised on every rank, with the
// first failing rank's message, so that the job ends alike everywhere (exit 2, the
// message printed once). Collective over the world: every rank calls it, after bootstrap.
void check_on_every_rank(const RankInfo& me, const std::function<void()>& checks);

// One line per rank (rank, host, local rank, device, and `role` when given: what the
// rank does), gathered to rank 0. Collective: every rank calls it; rank 0 gets the
// text, the others "".
std::string placement_table(const RankInfo& me, const std::string& role = "");

// Ends MPI cleanly (all ranks must call it).
void finalize();

// Ends the whole job from one rank: runs the abort hooks (NCCL communicators are
// aborted, not just left behind), then MPI_Abort when MPI is running (the launcher
// then stops every rank), else std::exit.
[[noreturn]] void abort_job(int exit_code);

// Hooks that abort_job runs first, keyed by their owner.
void register_abort_hook(const void* owner, std::function<void()> hook);
void unregister_abort_hook(const void* owner);
// Runs them without ending the process (the collective watchdog, before it exits).
void run_abort_hooks();

// Runs this rank's part of the job and returns its exit code. What escapes `job`:
// - a ConfigError raised alike on every rank (before bootstrap, or agreed by bootstrap
//   and check_on_every_rank): rank 0 prints it once, MPI is finalized, the exit code
//   is 2. One raised on this rank alone after bootstrap is logged by this rank and
//   ends the whole job through abort_job(2): the other ranks may be in a collective;
// - StopRequested, thrown by every rank at the same step after a stop signal: each
//   logs it, MPI is finalized, the exit code is kExitStopped (75);
// - anything else is this rank's own failure: it is logged with the rank's prefix and
//   the whole job ends through abort_job(1), so no rank waits forever in a collective.
int run_guarded(const std::function<int()>& job);

// NCCL's version when NCCL support is compiled in, else "not compiled in".
std::string nccl_version();

}  // namespace areal
