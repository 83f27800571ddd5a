// Bus bandwidth of the Communicator's all_gather, reduce_scatter and broadcast on
// float32 buffers from 1 MiB up, beside a plain memcpy of the same bytes measured in
// the same run (the ratio to memcpy is the figure: these machines are noisy).
//
//   mpirun -np 4 build/bench/areal_comm_bench [--min-mib 1] [--max-mib 1024]
//          [--seconds 0.3] [--json bench/results/comm_np4.json]
//
// Bus bandwidth follows nccl-tests: algbw = bytes / time, where bytes is the full
// buffer (all_gather output, reduce_scatter input, broadcast buffer); busbw =
// algbw * (n-1)/n for all_gather and reduce_scatter, algbw for broadcast. memcpy runs
// on every rank at once, as the collectives do, and its slowest rank counts. The last
// column is OpenMPI's own MPI_Reduce_scatter_block, which our ring reduce-scatter
// replaces, on the same buffers.
#include <ATen/ATen.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "areal/dist/bootstrap.h"
#include "areal/dist/communicator.h"
#include "areal/util/log.h"

namespace {

struct Options {
  int64_t min_mib = 1;
  int64_t max_mib = 1024;
  double seconds = 0.3;  // per measurement, after one warm-up call
  std::string json_path;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i], value = argv[i + 1];
    if (key == "--min-mib") o.min_mib = std::stoll(value);
    else if (key == "--max-mib") o.max_mib = std::stoll(value);
    else if (key == "--seconds") o.seconds = std::stod(value);
    else if (key == "--json") o.json_path = value;
    else throw std::invalid_argument("unknown argument " + key + " (see the comment at the top of comm_bench.cpp)");
  }
  return o;
}

// Seconds per call of `op`, timed together on all ranks (barrier before, the slowest
// rank's time after), repeating until `budget` seconds have passed (at least twice).
double time_per_call(const std::function<void()>& op, double budget) {
  op();  // warm-up: page faults, first-touch, MPI's connection setup
  int calls = 0;
  double elapsed = 0;
  while (calls < 2 || elapsed < budget) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto start = std::chrono::steady_clock::now();
    op();
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    elapsed += t;
    ++calls;
  }
  return elapsed / calls;
}

}  // namespace

int main(int argc, char** argv) {
  areal::Config cfg;
  cfg.init_from_scratch = true;
  cfg.device = "cpu";
  return areal::run_guarded([&] {
    Options opt = parse(argc, argv);
    areal::RankInfo me = areal::bootstrap(cfg);
    areal::log::configure(me.rank, me.world_size, "info", false);
    areal::Communicator comm(me);
    const int n = me.world_size;
    const double bus_factor = n > 1 ? double(n - 1) / n : 1.0;

    nlohmann::json results = nlohmann::json::array();
    if (me.rank == 0)
      std::printf("| MiB | memcpy GB/s | all_gather busbw GB/s (x memcpy) | reduce_scatter busbw GB/s (x memcpy) | "
                  "broadcast busbw GB/s (x memcpy) | MPI_Reduce_scatter_block GB/s (x memcpy) |\n"
                  "|---|---|---|---|---|---|\n");
    for (int64_t mib = opt.min_mib; mib <= opt.max_mib; mib *= 4) {
      const int64_t bytes = mib << 20;
      const int64_t elements = bytes / 4 / n * n;  // a multiple of the world size
      const double size = static_cast<double>(elements) * 4;
      nlohmann::json row = {{"mib", mib}, {"bytes", size}};
      {
        at::Tensor src = at::ones({elements}), dst = at::empty({elements});
        double t = time_per_call([&] { std::memcpy(dst.data_ptr(), src.data_ptr(), elements * 4); }, opt.seconds);
        row["memcpy_gbps"] = size / t / 1e9;
      }
      {
        at::Tensor shard = at::ones({elements / n}), full = at::empty({elements});
        double t = time_per_call([&] { comm.all_gather(shard, full); }, opt.seconds);
        row["all_gather_busbw_gbps"] = size / t / 1e9 * bus_factor;
      }
      {
        at::Tensor input = at::ones({elements}), shard = at::empty({elements / n});
        double t = time_per_call([&] { comm.reduce_scatter(input, shard, areal::ReduceOp::Sum); }, opt.seconds);
        row["reduce_scatter_busbw_gbps"] = size / t / 1e9 * bus_factor;
      }
      {
        // The reference our ring replaces: OpenMPI's own reduce-scatter on the same buffers.
        at::Tensor input = at::ones({elements}), shard = at::empty({elements / n});
        double t = time_per_call(
            [&] {
              MPI_Reduce_scatter_block(input.data_ptr(), shard.data_ptr(), static_cast<int>(elements / n), MPI_FLOAT,
                                       MPI_SUM, MPI_COMM_WORLD);
            },
            opt.seconds);
        row["mpi_reduce_scatter_block_busbw_gbps"] = size / t / 1e9 * bus_factor;
      }
      {
        at::Tensor buffer = at::ones({elements});
        double t = time_per_call([&] { comm.broadcast(buffer, 0); }, opt.seconds);
        row["broadcast_busbw_gbps"] = size / t / 1e9;
      }
      double mem = row["memcpy_gbps"];
      for (const char* op : {"all_gather", "reduce_scatter", "broadcast", "mpi_reduce_scatter_block"})
        row[std::string(op) + "_vs_memcpy"] = row[std::string(op) + "_busbw_gbps"].get<double>() / mem;
      if (me.rank == 0) {
        auto cell = [&](const char* op) {
          char text[64];
          std::snprintf(text, sizeof text, "%.2f (%.2f)", row[std::string(op) + "_busbw_gbps"].get<double>(),
                        row[std::string(op) + "_vs_memcpy"].get<double>());
          return std::string(text);
        };
        std::printf("| %lld | %.2f | %s | %s | %s | %s |\n", static_cast<long long>(mib), mem, cell("all_gather").c_str(),
                    cell("reduce_scatter").c_str(), cell("broadcast").c_str(), cell("mpi_reduce_scatter_block").c_str());
        std::fflush(stdout);
      }
      results.push_back(row);
    }
    if (me.rank == 0 && !opt.json_path.empty()) {
      nlohmann::json doc = {{"benchmark", "comm_bench"}, {"world_size", n}, {"dtype", "float32"},
                            {"transport", "MPI (CPU)"}, {"results", results}};
      std::ofstream(opt.json_path) << doc.dump(2) << "\n";
    }
    areal::finalize();
    return 0;
  });
}
