// A program for `mpirun -np 2`: memory-efficient load with LoRA, every rank printing
// its progress through each stage, then one check on every rank (the base equals the
// checkpoint exactly; lora_B is zero; the adapted model's logits equal the base's).
// Prints "run_fsdp_memory_efficient_lora: OK" on rank 0 and exits 0 when all hold.
//   mpirun -np 2 build/tests/run_fsdp_memory_efficient_lora [checkpoint_dir]
#include <ATen/ATen.h>
#include <mpi.h>

#include <cstdio>

#include "areal/dist/bootstrap.h"
#include "areal/fsdp/engine.h"
#include "areal/fsdp/staged_init.h"
#include "areal/io/checkpoint.h"
#include "areal/model/hf_weights.h"
#include "areal/util/log.h"
#include "areal/util/memory.h"
#include "test_paths.h"

int main(int argc, char** argv) {
  using namespace areal;
  Config cfg;
  cfg.model_path = argc > 1 ? argv[1] : source_path("tests/fixtures/models/llama");
  cfg.fsdp.memory_efficient_load = true;
  cfg.actor.use_lora = true;
  cfg.device = "cpu";
  return run_guarded([&] {
    RankInfo me = bootstrap(cfg);
    log::configure(me.rank, me.world_size, "warn", false);
    Communicator comm(me);
    InitResult init = staged_init(cfg, me, comm);
    for (const auto& stage : init.stages)
      std::printf("[rank %d/%d] stage %-12s done in %.3f s, peak +%s\n", me.rank, me.world_size, stage.name.c_str(),
                  stage.seconds, format_bytes(stage.peak_growth_bytes).c_str());
    std::fflush(stdout);

    int failures = 0;
    io::CheckpointReader checkpoint(cfg.model_path);
    for (size_t u = 0; u < init.model->units().size(); ++u) {
      at::Tensor full = init.model->gather_unit(u, comm, at::kFloat);
      for (const auto& [name, view] : init.model->unit_views(u, full))
        if (!at::equal(view, checkpoint.read(name).to(at::kFloat))) {
          std::printf("[rank %d] base weight %s differs from the checkpoint\n", me.rank, name.c_str());
          ++failures;
        }
    }
    for (size_t layer = 0; layer < init.model->adapter_units().size(); ++layer)
      for (const auto& [name, view] : init.model->adapter_views(layer, init.model->gather_adapter(layer, comm, at::kFloat)))
        if (name.find("lora_B") != std::string::npos && view.abs().max().item<double>() != 0) {
          std::printf("[rank %d] %s is not zero at start\n", me.rank, name.c_str());
          ++failures;
        }
    FsdpEngine engine(*init.model, comm, at::kFloat, at::kFloat);
    at::Tensor ids = at::arange(12, at::kLong).view({2, 6}).remainder(init.model->config().vocab_size);
    at::NoGradGuard no_grad;
    at::Tensor adapted = engine.forward(ids);
    if (!at::allclose(adapted, load_causal_lm(cfg.model_path, at::kFloat)->forward(ids), 1e-5, 1e-5)) {
      std::printf("[rank %d] the adapted model's logits differ from the base model's\n", me.rank);
      ++failures;
    }
    std::printf("[rank %d/%d] check: %s\n", me.rank, me.world_size, failures ? "FAILED" : "ok");
    MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (me.rank == 0 && failures == 0) std::printf("run_fsdp_memory_efficient_lora: OK\n");
    finalize();
    return failures ? 1 : 0;
  });
}
