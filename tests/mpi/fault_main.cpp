// A job in which rank 1 fails while the others wait in a collective, to check that
// the whole job ends quickly with rank 1's error (tests/test_binary.cpp runs it).
//   areal_fault throw   rank 1 throws instead of joining an all_reduce
//   areal_fault kill    rank 1 is killed by SIGKILL instead of joining
#include <ATen/ATen.h>

#include <csignal>
#include <stdexcept>
#include <string>

#include "areal/dist/bootstrap.h"
#include "areal/dist/communicator.h"
#include "areal/util/log.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "throw";
  areal::Config cfg;
  cfg.init_from_scratch = true;
  cfg.device = "cpu";
  return areal::run_guarded([&] {
    areal::RankInfo me = areal::bootstrap(cfg);
    areal::log::configure(me.rank, me.world_size, "info", false);
    areal::Communicator comm(me);
    at::Tensor x = at::ones({1024});
    comm.all_reduce(x, areal::ReduceOp::Sum);  // everyone is up
    if (me.rank == 1) {
      if (mode == "kill") std::raise(SIGKILL);
      throw std::runtime_error("injected failure on rank 1 while the others wait in all_reduce");
    }
    comm.all_reduce(x, areal::ReduceOp::Sum);  // never completes: rank 1 is gone
    return 0;
  });
}
