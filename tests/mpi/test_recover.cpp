// Recover checkpoints across world sizes: written by this run's ranks (mpirun -np 1..4)
// after two real AdamW steps, then loaded as every rank of 1..5 ranks would load it.
// The loaded shards and moments, laid end to end, must equal this run's gathered
// weights and moments bit for bit, with zero padding; a missing rank file is an error
// naming it.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include "catch_with_torch.h"

#include <unistd.h>

#include <filesystem>

#include "areal/fsdp/engine.h"
#include "areal/fsdp/staged_init.h"
#include "areal/io/safetensors_header.h"
#include "areal/optim/adamw.h"
#include "areal/recover/recover_checkpoint.h"
#include "mpi_fixture.h"
#include "test_paths.h"

using namespace areal;
using areal::testing::g_comm;
using areal::testing::g_me;
namespace fs = std::filesystem;

namespace {

// The whole unpadded buffer of each unit: `shards[u]` gathered from every rank.
std::vector<at::Tensor> gathered(const std::vector<at::Tensor>& shards, const std::vector<UnitLayout>& units) {
  std::vector<at::Tensor> full;
  for (size_t u = 0; u < units.size(); ++u) {
    at::Tensor all = at::empty({units[u].padded_numel}, at::kFloat);
    g_comm->all_gather(shards[u].detach().contiguous(), all);
    full.push_back(all.narrow(0, 0, units[u].numel).clone());
  }
  return full;
}

// A directory every rank names alike (rank 0's pid).
fs::path shared_temp_dir(const std::string& name) {
  at::Tensor pid = at::full({1}, static_cast<int64_t>(::getpid()), at::kLong);
  g_comm->broadcast(pid, 0);
  return fs::temp_directory_path() / (name + "_" + std::to_string(pid.item<int64_t>()));
}

}  // namespace

TEST_CASE("recover: a checkpoint written at N ranks loads exactly at 1 to 5 ranks", "[mpi][recover]") {
  Config cfg;
  cfg.model_path = source_path("tests/fixtures/models/qwen2_tied");
  cfg.fsdp.memory_efficient_load = true;
  cfg.device = "cpu";
  InitResult init = staged_init(cfg, g_me, *g_comm);
  ShardedModel& model = *init.model;
  FsdpEngine engine(model, *g_comm, at::kFloat, at::kFloat);
  ShardedAdamW optimizer(model.trainable_shards(), cfg.optimizer, *g_comm);
  for (int step = 0; step < 2; ++step) {  // moments that are not zero
    at::Tensor ids = at::randint(model.config().vocab_size, {2, 8},
                                 at::make_generator<at::CPUGeneratorImpl>(10 * step + g_me.rank), at::kLong);
    optimizer.zero_grad();
    at::Tensor logits = engine.forward(ids);
    at::cross_entropy_loss(logits.narrow(1, 0, 7).reshape({-1, logits.size(-1)}), ids.narrow(1, 1, 7).reshape({-1}))
        .backward();
    optimizer.step(1e-3);
  }
  const std::vector<at::Tensor> weights = gathered(model.trainable_shards(), model.units());
  const std::vector<at::Tensor> exp_avg = gathered(optimizer.exp_avg(), model.units());
  const std::vector<at::Tensor> exp_avg_sq = gathered(optimizer.exp_avg_sq(), model.units());
  REQUIRE(exp_avg_sq[0].abs().sum().item<double>() > 0);

  const fs::path dir = shared_temp_dir("areal_recover_np" + std::to_string(g_me.world_size));
  RecoverPoint point;
  point.job = "sft";
  point.steps_done = 2;
  point.figures = {{"first_loss", 1.5}};
  write_recover_checkpoint(dir.string(), point, model, &optimizer, *g_comm);

  std::optional<RecoverPoint> read = read_recover_point(dir.string());
  REQUIRE(read);
  CHECK(read->steps_done == 2);
  CHECK(read->world_size == g_me.world_size);
  CHECK(read->optimizer_steps == 2);
  CHECK(read->figures.at("first_loss") == 1.5);
  for (int world = 1; world <= 5; ++world) {
    auto skeleton = std::make_shared<CausalLM>(model.config(), at::TensorOptions().device(at::kMeta));
    for (int rank = 0; rank < world; ++rank) {
      INFO("loaded as rank " << rank << " of " << world);
      ShardedModel loaded(skeleton, plan_units(*skeleton, world), rank, world, at::Device(at::kCPU));
      ShardedAdamW loaded_optimizer(loaded.trainable_shards(), cfg.optimizer, *g_comm);
      load_recover_checkpoint(dir.string(), *read, loaded, &loaded_optimizer);
      CHECK(loaded_optimizer.steps_taken() == 2);
      for (size_t u = 0; u < loaded.units().size(); ++u) {
        const UnitLayout& unit = loaded.units()[u];
        const int64_t begin = std::min(unit.numel, rank * unit.shard_numel);
        const int64_t owned = std::min(unit.numel, begin + unit.shard_numel) - begin;
        auto check = [&](const at::Tensor& shard, const at::Tensor& want, const char* what) {
          INFO(unit.name << " " << what);
          CHECK(at::equal(shard.narrow(0, 0, owned), want.narrow(0, begin, owned)));
          CHECK(shard.narrow(0, owned, unit.shard_numel - owned).abs().sum().item<double>() == 0);
        };
        check(loaded.shard(u), weights[u], "weights");
        check(loaded_optimizer.exp_avg()[u], exp_avg[u], "exp_avg");
        check(loaded_optimizer.exp_avg_sq()[u], exp_avg_sq[u], "exp_avg_sq");
      }
    }
  }

  // A rank's file gone: loading names it.
  g_comm->barrier();
  if (g_me.rank == 0) {
    char name[64];
    std::snprintf(name, sizeof name, "rank-%05d-of-%05d.safetensors", g_me.world_size - 1, g_me.world_size);
    fs::remove(dir / name);
    auto skeleton = std::make_shared<CausalLM>(model.config(), at::TensorOptions().device(at::kMeta));
    ShardedModel loaded(skeleton, plan_units(*skeleton, 1), 0, 1, at::Device(at::kCPU));
    CHECK_THROWS_WITH(load_recover_checkpoint(dir.string(), *read, loaded, nullptr),
                      Catch::Matchers::Contains(name));
    fs::remove_all(dir);
  }
  g_comm->barrier();
}
