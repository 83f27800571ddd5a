// Tensor-parallel generation from the FSDP shards, timed: run under mpirun -np T, the
// ranks form one generation group of t = T (rollout.backend: areal:d1tT) and generate
// every prompt together, as the RL loop's rollout does. bench/run_generation.sh runs it
// at t = 1 and t = 2 on the same model and prompts.
//
//   mpirun -np T areal_tp_generation_bench MODEL_DIR PROMPTS.json NEW_TOKENS OUT.json
//
// Exactly NEW_TOKENS sampled tokens per answer (no stop token). Rank 0 writes the
// figures: tokens/s, the time to take the slices from the shards, and the bytes of
// policy slices and KV cache one rank held.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "areal/dist/bootstrap.h"
#include "areal/dist/communicator.h"
#include "areal/fsdp/staged_init.h"
#include "areal/rollout/generation.h"
#include "areal/util/log.h"

using namespace areal;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: mpirun -np T %s MODEL_DIR PROMPTS.json NEW_TOKENS OUT.json\n", argv[0]);
    return 2;
  }
  Config cfg;
  cfg.model_path = argv[1];
  cfg.fsdp.memory_efficient_load = true;
  cfg.device = "cpu";
  return run_guarded([&] {
    const RankInfo me = bootstrap(cfg);
    log::configure(me.rank, me.world_size, "warn", false);
    int code = 0;
    {
      Communicator comm(me);
      const std::vector<std::vector<int64_t>> prompts = nlohmann::json::parse(std::ifstream(argv[2]));
      const int64_t new_tokens = std::stoll(argv[3]);
      InitResult init = staged_init(cfg, me, comm);
      std::unique_ptr<Communicator> group = me.world_size > 1 ? comm.split(0, me.rank) : nullptr;

      SamplingParams params;
      params.max_new_tokens = new_tokens;
      auto generators_for = [&](size_t rows) {
        std::vector<at::Generator> generators;
        for (size_t r = 0; r < rows; ++r) generators.push_back(answer_generator(0, 0, static_cast<int64_t>(r), 0));
        return generators;
      };
      auto slicing_start = std::chrono::steady_clock::now();
      Policy sharded(cfg, *init.model, comm);
      RolloutModel policy(sharded, group.get(), at::kFloat, at::Device("cpu"));
      const double slicing_seconds = seconds_since(slicing_start);
      {  // warm-up: a few rows, a few tokens
        SamplingParams warm = params;
        warm.max_new_tokens = 4;
        std::vector<std::vector<int64_t>> few(prompts.begin(), prompts.begin() + std::min<size_t>(4, prompts.size()));
        auto generators = generators_for(few.size());
        generate(policy, few, warm, generators);
      }
      comm.barrier();
      auto generators = generators_for(prompts.size());
      int64_t cache_bytes = 0;
      const auto start = std::chrono::steady_clock::now();
      std::vector<Generated> answers = generate(policy, prompts, params, generators, &cache_bytes);
      const double seconds = seconds_since(start);
      int64_t tokens = 0;
      for (const Generated& g : answers) tokens += static_cast<int64_t>(g.tokens.size());
      if (me.rank == 0) {
        nlohmann::json out = {{"tensor_parallel", me.world_size}, {"rows", prompts.size()}, {"new_tokens", new_tokens},
                              {"generated_tokens", tokens}, {"seconds", seconds}, {"tokens_per_second", tokens / seconds},
                              {"slicing_seconds", slicing_seconds}, {"weight_bytes_per_rank", policy.weight_bytes()},
                              {"cache_bytes_per_rank", cache_bytes}};
        std::ofstream(argv[4]) << out.dump(1) << "\n";
        std::printf("t = %d: %zu rows x %lld tokens: %.2f s, %.0f tokens/s; slices %.1f MiB + KV cache %.1f MiB per "
                    "rank, taken from the shards in %.2f s\n",
                    me.world_size, prompts.size(), static_cast<long long>(new_tokens), seconds, tokens / seconds,
                    policy.weight_bytes() / 1048576.0, cache_bytes / 1048576.0, slicing_seconds);
      }
      code = tokens == static_cast<int64_t>(prompts.size()) * new_tokens ? 0 : 1;
    }
    finalize();
    return code;
  });
}
