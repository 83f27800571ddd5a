// Entry point of the multi-rank tests: every rank runs the same Catch2 session
// (so collectives match), and the job fails when any rank's session fails.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <mpi.h>

#include <cstdlib>

#include "areal/util/log.h"
#include "mpi_fixture.h"

namespace areal::testing {
RankInfo g_me;
std::unique_ptr<Communicator> g_comm;
}  // namespace areal::testing

int main(int argc, char** argv) {
  using namespace areal::testing;
  areal::Config cfg;
  cfg.init_from_scratch = true;
  // AREAL_TEST_DEVICE=auto|cuda runs the same tests on CUDA tensors through NCCL.
  cfg.device = std::getenv("AREAL_TEST_DEVICE") ? std::getenv("AREAL_TEST_DEVICE") : "cpu";
  return areal::run_guarded([&] {
    g_me = areal::bootstrap(cfg);
    areal::log::configure(g_me.rank, g_me.world_size, "warn", false);
    g_comm = std::make_unique<areal::Communicator>(g_me);
    int failed = Catch::Session().run(argc, argv);
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    g_comm.reset();
    areal::finalize();
    return failed ? 1 : 0;
  });
}
