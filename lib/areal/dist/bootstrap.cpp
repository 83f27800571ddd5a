#include "areal/dist/bootstrap.h"

#include <mpi.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <vector>

#ifdef AREAL_WITH_NCCL
#include <nccl.h>
#endif

#include "areal/config/allocation.h"
#include "areal/dist/mpi_check.h"
#include "areal/util/log.h"
#include "areal/util/error.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

std::vector<std::pair<const void*, std::function<void()>>>& abort_hooks() {
  static std::vector<std::pair<const void*, std::function<void()>>> hooks;
  return hooks;
}

std::string pick_device(const Config& cfg, int local_rank, int local_world_size) {
  if (cfg.device == "cpu") return "cpu";
  int gpus = static_cast<int>(torch::cuda::device_count());
  if (gpus == 0) {
    if (cfg.device == "cuda") throw ConfigError("option 'device' = cuda, but this host has no usable CUDA device");
    return "cpu";
  }
  if (local_world_size > gpus)
    throw ConfigError(cat("device: ", local_world_size, " ranks share a host with ", gpus,
                          " GPUs; launch at most one rank per GPU, or set device=cpu"));
  return cat("cuda:", local_rank);
}

// A ConfigError that every rank raises together (raise_on_every_rank): run_guarded
// may end the job cleanly from each rank.
class AgreedConfigError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// The checks above may fail on some hosts only (a host without GPUs). Every rank
// learns of the first failing rank's message, so that all exit alike and rank 0
// can print it once.
void raise_on_every_rank(const std::string& problem, int rank, int world_size) {
  int first_failing = problem.empty() ? world_size : rank;
  AREAL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first_failing, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (first_failing == world_size) return;
  int length = static_cast<int>(problem.size());
  AREAL_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, first_failing, MPI_COMM_WORLD));
  std::string message = problem;
  message.resize(length);
  AREAL_MPI_CHECK(MPI_Bcast(message.data(), length, MPI_CHAR, first_failing, MPI_COMM_WORLD));
  throw AgreedConfigError(first_failing == 0 ? message : cat("rank ", first_failing, ": ", message));
}

}  // namespace

RankInfo bootstrap(const Config& cfg) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    AREAL_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
  }
  // Errors come back as codes so that we report them with context, then abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

  RankInfo info;
  AREAL_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &info.rank));
  AREAL_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &info.world_size));

  // Ranks that share memory are on one host: that gives the local rank.
  MPI_Comm local;
  AREAL_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, info.rank, MPI_INFO_NULL, &local));
  MPI_Comm_rank(local, &info.local_rank);
  MPI_Comm_size(local, &info.local_world_size);
  MPI_Comm_free(&local);

  char host[MPI_MAX_PROCESSOR_NAME];
  int host_length = 0;
  MPI_Get_processor_name(host, &host_length);
  info.host.assign(host, host_length);

  std::string problem;
  try {
    allocation_for_world(cfg, info.world_size);
    info.device = pick_device(cfg, info.local_rank, info.local_world_size);
  } catch (const ConfigError& e) {
    problem = e.what();
  }
  raise_on_every_rank(problem, info.rank, info.world_size);
  return info;
}

void check_on_every_rank(const RankInfo& me, const std::function<void()>& checks) {
  std::string problem;
  try {
    checks();
  } catch (const ConfigError& e) {
    problem = e.what();
    if (problem.empty()) problem = "a config error without a message";
  }
  raise_on_every_rank(problem, me.rank, me.world_size);
}

std::string placement_table(const RankInfo& me, const std::string& role) {
  constexpr int kLine = 256;
  char line[kLine] = {};
  std::string text = cat("rank ", me.rank, ": host ", me.host, ", local rank ", me.local_rank, "/",
                         me.local_world_size, ", device ", me.device, role.empty() ? "" : ", " + role);
  text.copy(line, kLine - 1);
  std::vector<char> all(me.rank == 0 ? static_cast<size_t>(kLine) * me.world_size : 0);
  AREAL_MPI_CHECK(MPI_Gather(line, kLine, MPI_CHAR, all.data(), kLine, MPI_CHAR, 0, MPI_COMM_WORLD));
  std::string table;
  for (int r = 0; r < (me.rank == 0 ? me.world_size : 0); ++r) table += cat("\n  ", all.data() + r * kLine);
  return table;
}

void finalize() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

void register_abort_hook(const void* owner, std::function<void()> hook) {
  abort_hooks().emplace_back(owner, std::move(hook));
}

void unregister_abort_hook(const void* owner) {
  auto& hooks = abort_hooks();
  std::erase_if(hooks, [owner](const auto& entry) { return entry.first == owner; });
}

void run_abort_hooks() {
  for (auto& [owner, hook] : abort_hooks()) hook();
}

void abort_job(int exit_code) {
  run_abort_hooks();
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::exit(exit_code);
}

namespace {

// Torch's message of `e` in one line, without the C++ backtrace that what() appends
// (dozens of frames per rank). Out of memory also says what to lower.
std::string torch_error_line(const c10::Error& e) {
  std::string message = e.what_without_backtrace();
  bool out_of_memory = dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr;
  for (const char* cpu_words : {"not enough memory", "can't allocate memory"})  // DefaultCPUAllocator
    out_of_memory = out_of_memory || message.find(cpu_words) != std::string::npos;
  if (const size_t end = message.find('\n'); end != std::string::npos) message.resize(end);
  if (!out_of_memory) return message;
  return cat("out of memory: ", message, " Lower what one step holds: actor.mb_spec.max_tokens_per_mb ",
             "(training micro-batches), train_dataset.batch_size, gconfig.n_samples or gconfig.max_new_tokens ",
             "(the rollout), valid_dataset.batch_size (the evaluation); or run on more ranks, or with ",
             "actor.dtype bfloat16 (docs/training.md, \"Out of memory\").");
}

}  // namespace

int run_guarded(const std::function<int()>& job) {
  try {
    return job();
  } catch (const ConfigError& e) {
    int initialized = 0, finalized = 0, rank = log::launcher_rank().rank, world_size = 1;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) {
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    }
    // Raised on this rank alone after bootstrap: the others may wait in a collective,
    // so finalizing here would leave them hanging.
    if (initialized && !finalized && world_size > 1 && !dynamic_cast<const AgreedConfigError*>(&e)) {
      log::error(e.what());
      abort_job(kExitConfigError);
    }
    if (rank == 0) log::error(e.what());
    finalize();
    return kExitConfigError;
  } catch (const StopRequested& e) {
    // Every rank stopped at the same step, after the recover checkpoint: a clean end.
    log::warn(e.what());
    finalize();
    return kExitStopped;
  } catch (const c10::Error& e) {
    log::error(cat("fatal: ", torch_error_line(e)));
    abort_job(kExitRuntimeError);
  } catch (const std::bad_alloc&) {
    log::error("fatal: out of memory: a host allocation failed (std::bad_alloc); see docs/training.md, \"Out of memory\"");
    abort_job(kExitRuntimeError);
  } catch (const std::exception& e) {
    log::error(cat("fatal: ", e.what()));
    abort_job(kExitRuntimeError);
  }
}

std::string nccl_version() {
#ifdef AREAL_WITH_NCCL
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "unavailable";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return cat(version / 10000, ".", (version / 100) % 100, ".", version % 100);
#else
  return "not compiled in";
#endif
}

}  // namespace areal
