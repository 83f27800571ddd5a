// A job in which rank 1 fails while the others wait in a collective, to check that
// the whole job ends quickly with rank 1's error (tests/test_binary.cpp runs it).
//   areal_fault throw   rank 1 throws instead of joining an all_reduce
//   areal_fault kill    rank 1 is killed by SIGKILL instead of joining
//   areal_fault queued  (one process) device work that never completes, as NCCL work
//                       waiting for a stopped peer: the watchdog aborts and exits
//   areal_fault queued-done  the same work completing after 0.5 s: nothing happens
#include <ATen/ATen.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>
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
  if (mode == "queued" || mode == "queued-done") {
    // The watchdog's view of NCCL work (nccl_backend.cpp hands it the query of a CUDA
    // event), with a clock instead of the event, so it runs without a GPU.
    areal::CollectiveWatchdog dog(1.0);
    areal::register_abort_hook(&dog, [] { std::printf("abort hook ran\n"); std::fflush(stdout); });
    const auto queued_at = std::chrono::steady_clock::now();
    const bool completes = mode == "queued-done";
    dog.watch_queued("all_gather", 4096, [=] {
      return completes && std::chrono::steady_clock::now() - queued_at > std::chrono::milliseconds(500);
    });
    std::this_thread::sleep_for(std::chrono::seconds(4));
    std::printf("still running after 4 s\n");
    return 0;
  }
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
