// Memory-efficient load with LoRA on (run under mpirun -np 1..4 with the other
// multi-rank tests). AReaL's own test of this combination never checks the base
// weights; here they must equal the checkpoint exactly, the adapters must start as
// LoRA prescribes (B = 0, so the first forward equals the base model's), and a
// training step must change the adapters and nothing else.
#include <ATen/ATen.h>
#include "catch_with_torch.h"

#include <cstdlib>
#include <filesystem>

#include "areal/fsdp/engine.h"
#include "areal/fsdp/save.h"
#include "areal/fsdp/staged_init.h"
#include "areal/io/checkpoint.h"
#include "areal/model/hf_weights.h"
#include "areal/optim/adamw.h"
#include "mpi/mpi_fixture.h"
#include "run_python.h"
#include "test_paths.h"

using namespace areal;
using areal::testing::g_comm;
using areal::testing::g_me;
using Catch::Matchers::Contains;

namespace {

// Memory-efficient load of `path` on the CPU in float32, LoRA rank 4, alpha 8 (scale 2).
Config lora_config(const std::string& path) {
  Config cfg;
  cfg.model_path = path;
  cfg.fsdp.memory_efficient_load = true;
  cfg.device = "cpu";
  cfg.actor.use_lora = true;
  cfg.actor.lora_rank = 4;
  cfg.actor.lora_alpha = 8;
  cfg.actor.dtype = "float32";
  return cfg;
}

}  // namespace

TEST_CASE("lora: memory-efficient load keeps the base exact, adapters start at B = 0, only adapters train",
          "[mpi][lora]") {
  const std::string path = source_path("tests/fixtures/models/qwen2_untied");
  Config cfg = lora_config(path);
  FsdpModel fsdp = make_fsdp_engine(cfg, g_me, *g_comm);  // the C++ API: a Config in code, then the engine
  ShardedModel& model = fsdp.model();
  REQUIRE(model.has_adapters());
  CHECK(model.adapter_scale() == 2.0);

  // The base: exactly the checkpoint.
  io::CheckpointReader checkpoint(path);
  for (size_t u = 0; u < model.units().size(); ++u) {
    at::Tensor full = model.gather_unit(u, *g_comm, at::kFloat);
    for (const auto& [name, view] : model.unit_views(u, full)) {
      INFO(name);
      CHECK(at::equal(view, checkpoint.read(name)));
    }
  }
  // The sliced path (memory_efficient_load false) gives the same base and adapters, bit for bit.
  {
    Config sliced_cfg = cfg;
    sliced_cfg.fsdp.memory_efficient_load = false;
    InitResult sliced = staged_init(sliced_cfg, g_me, *g_comm);
    for (size_t u = 0; u < model.units().size(); ++u) CHECK(at::equal(sliced.model->shard(u), model.shard(u)));
    for (size_t l = 0; l < model.adapter_units().size(); ++l)
      CHECK(at::equal(sliced.model->adapter_shard(l), model.adapter_shard(l)));
  }
  // The adapters: every linear of every layer, A random within PEFT's bound, B zero.
  const int64_t linears = 7;
  for (size_t layer = 0; layer < model.adapter_units().size(); ++layer) {
    at::Tensor full = model.gather_adapter(layer, *g_comm, at::kFloat);
    auto views = model.adapter_views(layer, full);
    CHECK(static_cast<int64_t>(views.size()) == 2 * linears);
    for (const auto& [name, view] : views) {
      INFO(name);
      if (name.find("lora_B") != std::string::npos) {
        CHECK(view.abs().max().item<double>() == 0);
      } else {
        CHECK(view.abs().max().item<double>() > 0);
        CHECK(view.abs().max().item<double>() <= 1.0 / std::sqrt(static_cast<double>(view.size(1))));
      }
    }
  }

  // The first forward equals the base model's (B = 0).
  FsdpEngine& engine = *fsdp.engine;
  at::Tensor ids = io::SafetensorsReader(path + "/reference.safetensors").read("input_ids");
  at::Tensor logits = engine.forward(ids);
  {
    at::NoGradGuard no_grad;
    CHECK(at::allclose(logits, load_causal_lm(path, at::kFloat)->forward(ids), 1e-5, 1e-5));
  }

  // One step: the adapters move, the base does not, and only adapters have optimizer state.
  std::vector<at::Tensor> base_before, adapters_before;
  for (size_t u = 0; u < model.units().size(); ++u) base_before.push_back(model.shard(u).detach().clone());
  for (size_t l = 0; l < model.adapter_units().size(); ++l) adapters_before.push_back(model.adapter_shard(l).detach().clone());
  std::vector<at::Tensor> trainable = model.trainable_shards();
  CHECK(trainable.size() == model.adapter_units().size());
  cfg.optimizer.lr = 1e-2;
  ShardedAdamW optimizer(trainable, cfg.optimizer, *g_comm);
  const int64_t length = ids.size(1), vocab = logits.size(-1);
  at::cross_entropy_loss(logits.narrow(1, 0, length - 1).reshape({-1, vocab}), ids.narrow(1, 1, length - 1).reshape({-1}))
      .backward();
  for (size_t u = 0; u < model.units().size(); ++u) CHECK_FALSE(model.shard(u).grad().defined());
  CHECK_FALSE(optimizer.step(cfg.optimizer.lr).skipped);
  for (size_t u = 0; u < model.units().size(); ++u) CHECK(at::equal(model.shard(u), base_before[u]));
  at::Tensor moved = at::zeros({1}, at::kDouble);
  for (size_t l = 0; l < model.adapter_units().size(); ++l)
    moved += (model.adapter_shard(l).detach() - adapters_before[l]).abs().sum().to(at::kDouble);
  g_comm->all_reduce(moved, ReduceOp::Sum);
  CHECK(moved.item<double>() > 0);
  // lora_B is no longer zero: the adapted model now differs from the base.
  at::Tensor b = model.adapter_views(0, model.gather_adapter(0, *g_comm, at::kFloat)).at(1).second;
  CHECK(b.abs().max().item<double>() > 0);

  // Merged weights on request: a plain model loaded from them computes what the
  // adapted sharded model computes.
  const auto merged = std::filesystem::temp_directory_path() / ("areal_merged_np" + std::to_string(g_me.world_size));
  save_sharded_checkpoint(model, *g_comm, merged.string(), at::kFloat, uint64_t{1} << 30, /*merge_adapters=*/true);
  at::NoGradGuard no_grad;
  at::Tensor adapted = engine.forward(ids);
  if (g_me.rank == 0) {
    at::Tensor plain = load_causal_lm(merged.string(), at::kFloat)->forward(ids);
    CHECK(at::allclose(adapted, plain, 1e-5, 1e-5));
    CHECK_FALSE(at::allclose(adapted, load_causal_lm(path, at::kFloat)->forward(ids), 1e-5, 1e-5));
    std::filesystem::remove_all(merged);
  }
  g_comm->barrier();
}

TEST_CASE("lora: training starts from a PEFT adapter directory, computing what PEFT computes", "[mpi][lora]") {
  const std::string base = source_path("tests/fixtures/models/qwen2_untied");
  // PEFT's adapter (A and B random) and its logits: CTest's peft_adapter_reference writes
  // them once for every np (AREAL_PEFT_ADAPTER); otherwise rank 0 has PEFT write them here.
  const char* prepared = std::getenv("AREAL_PEFT_ADAPTER");
  const bool own = prepared == nullptr || *prepared == '\0';
  const auto dir = own ? std::filesystem::temp_directory_path() / ("areal_peft_np" + std::to_string(g_me.world_size))
                       : std::filesystem::path(prepared);
  at::Tensor written = at::zeros({1}, at::kDouble);
  if (g_me.rank == 0) {
    if (own) {
      std::filesystem::remove_all(dir);
      PythonResult python = run_python("peft_adapter_reference.py " + base + " " + dir.string());
      INFO(python.output);
      CHECK(python.exit_code == 0);
    }
    written.fill_(std::filesystem::exists(dir / "reference_logits.safetensors") ? 1 : 0);
  }
  g_comm->broadcast(written, 0);
  REQUIRE(written.item<double>() == 1);

  Config cfg = lora_config(base);
  cfg.actor.lora_adapter_path = dir.string();  // PEFT's adapter, of the same rank and alpha
  {
    FsdpModel fsdp = make_fsdp_engine(cfg, g_me, *g_comm);
    // Every adapter tensor is the file's, bit for bit.
    io::SafetensorsReader file((dir / "adapter_model.safetensors").string());
    int64_t compared = 0;
    for (size_t layer = 0; layer < fsdp.model().adapter_units().size(); ++layer)
      for (const auto& [name, view] : fsdp.model().adapter_views(layer, fsdp.model().gather_adapter(layer, *g_comm, at::kFloat))) {
        INFO(name);
        CHECK(at::equal(view, file.read("base_model.model." + name)));
        ++compared;
      }
    CHECK(compared == static_cast<int64_t>(file.tensors().size()));
    // The adapted model's logits are PEFT's.
    io::SafetensorsReader reference((dir / "reference_logits.safetensors").string());
    at::NoGradGuard no_grad;
    at::Tensor logits = fsdp.engine->forward(reference.read("input_ids"));
    const at::Tensor expected = reference.read("logits");
    CHECK(at::allclose(logits, expected, 1e-4, 1e-4));
    CHECK_FALSE(at::allclose(logits, load_causal_lm(base, at::kFloat)->forward(reference.read("input_ids")), 1e-3, 1e-3));
  }

  // A wrong adapter is refused on every rank before the checkpoint loads, saying why.
  Config wrong_rank = cfg;
  wrong_rank.actor.lora_rank = 8;
  CHECK_THROWS_WITH(make_fsdp_engine(wrong_rank, g_me, *g_comm), Contains("the adapter has r = 4 and lora_alpha = 8") &&
                                                                     Contains("actor.lora_rank = 8"));
  Config fewer_targets = cfg;
  fewer_targets.actor.target_modules = {"q_proj", "v_proj"};
  CHECK_THROWS_WITH(make_fsdp_engine(fewer_targets, g_me, *g_comm), Contains("is not one this run trains"));
  Config other_base = cfg;
  other_base.model_path = source_path("tests/fixtures/models/llama_mha_bias");  // k_proj, v_proj: 32 rows, not 16
  CHECK_THROWS_WITH(make_fsdp_engine(other_base, g_me, *g_comm), Contains("adapter_model.safetensors") &&
                                                                     Contains("the base model needs"));
  g_comm->barrier();
  if (g_me.rank == 0 && own) std::filesystem::remove_all(dir);
}
