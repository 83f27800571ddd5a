// The staged initialization under mpirun -np 1..4: after loading, the gathered units
// equal the checkpoint's tensors exactly (both paths, tied and untied, float32 and
// bfloat16 checkpoints), the two paths give bit-identical shards, and
// init_from_scratch gives the same weights for every world size.
#include <ATen/ATen.h>
#include "catch_with_torch.h"
#include "run_python.h"
#include <mpi.h>
#include <unistd.h>

#include <filesystem>

#include "areal/fsdp/save.h"
#include "areal/fsdp/staged_init.h"
#include "areal/io/checkpoint.h"
#include "areal/model/hf_weights.h"
#include "mpi_fixture.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using namespace areal;
using areal::testing::g_comm;
using areal::testing::g_me;

namespace {

const std::string kFixtures = source_path("tests/fixtures/models");

Config config_for(const std::string& path, bool memory_efficient) {
  Config cfg;
  cfg.model_path = path;
  cfg.fsdp.memory_efficient_load = memory_efficient;
  cfg.device = "cpu";
  return cfg;
}

// Every unit gathered and compared, parameter by parameter, with the checkpoint
// (read here independently, whole, converted to float32 as the master copy is).
void check_against_checkpoint(ShardedModel& model, const std::string& path) {
  io::CheckpointReader checkpoint(path);
  for (size_t u = 0; u < model.units().size(); ++u) {
    at::Tensor full = model.gather_unit(u, *g_comm, at::kFloat);
    for (const auto& [name, view] : model.unit_views(u, full)) {
      INFO(path << ": " << name);
      CHECK(at::equal(view, checkpoint.read(name).to(at::kFloat)));
    }
    const UnitLayout& unit = model.units()[u];
    CHECK(at::equal(full.narrow(0, unit.numel, unit.padded_numel - unit.numel),
                    at::zeros({unit.padded_numel - unit.numel})));  // padding stays zero
  }
}

}  // namespace

TEST_CASE("staged init: gathered weights equal the checkpoint on both paths", "[mpi][init]") {
  for (const auto& name : {"qwen2_tied", "qwen2_untied", "qwen3", "llama_mha_bias"}) {
    const std::string path = kFixtures + "/" + name;
    InitResult streamed = staged_init(config_for(path, true), g_me, *g_comm);
    InitResult plain = staged_init(config_for(path, false), g_me, *g_comm);
    check_against_checkpoint(*streamed.model, path);
    for (size_t u = 0; u < streamed.model->units().size(); ++u) {
      INFO(name << " unit " << u);
      CHECK(at::equal(streamed.model->shard(u), plain.model->shard(u)));  // bit-identical paths
    }
    // The stages are reported in order with their names.
    std::vector<std::string> names;
    for (const auto& s : streamed.stages) names.push_back(s.name);
    CHECK(names == std::vector<std::string>{"cpu_skeleton", "fsdp_shard", "rank0_load", "broadcast", "verify"});
  }
}

TEST_CASE("staged init: a bfloat16 checkpoint loads exactly into float32 shards", "[mpi][init]") {
  const fs::path dir = fs::temp_directory_path() / ("areal_bf16_ckpt_" + std::to_string(g_me.world_size));
  if (g_me.rank == 0) save_hf_checkpoint(*load_causal_lm(kFixtures + "/llama", at::kBFloat16), dir.string());
  g_comm->barrier();
  REQUIRE(io::CheckpointReader(dir.string()).entry("model.norm.weight").dtype == io::DType::BF16);
  for (bool memory_efficient : {true, false}) {
    InitResult init = staged_init(config_for(dir.string(), memory_efficient), g_me, *g_comm);
    check_against_checkpoint(*init.model, dir.string());
  }
  g_comm->barrier();
  if (g_me.rank == 0) fs::remove_all(dir);
}

TEST_CASE("staged init: init_from_scratch gives the same weights for every world size", "[mpi][init]") {
  Config cfg;
  cfg.init_from_scratch = true;
  cfg.device = "cpu";
  cfg.seed = 17;
  InitResult init = staged_init(cfg, g_me, *g_comm);
  ShardedModel& model = *init.model;
  CHECK(model.config().vocab_size == 258);  // the built-in tiny model
  for (size_t u = 0; u < model.units().size(); ++u) {
    const UnitLayout& unit = model.units()[u];
    at::Tensor full = model.gather_unit(u, *g_comm, at::kFloat);
    // seeded_unit takes no world size; the padding (which does depend on it) is zero.
    at::Tensor reference = seeded_unit(unit, u, 17);
    CHECK(at::equal(full.narrow(0, 0, unit.numel), reference.narrow(0, 0, unit.numel)));
    CHECK(full.narrow(0, unit.numel, unit.padded_numel - unit.numel).abs().sum().item<double>() == 0);
  }
  // A different seed gives different weights.
  cfg.seed = 18;
  InitResult other = staged_init(cfg, g_me, *g_comm);
  CHECK_FALSE(at::equal(other.model->shard(1), model.shard(1)));
}

TEST_CASE("staged init: the stage table lists every rank", "[mpi][init]") {
  Config cfg;
  cfg.init_from_scratch = true;
  cfg.device = "cpu";
  InitResult init = staged_init(cfg, g_me, *g_comm);
  InitReport report = gather_init_report(init, *g_comm);
  if (g_me.rank == 0) {
    REQUIRE(report.ranks.size() == static_cast<size_t>(g_me.world_size));
    std::string table = format_init_table(report);
    CHECK(table.find("peak +mem r" + std::to_string(g_me.world_size - 1)) != std::string::npos);
    CHECK(table.find("rank0_load") != std::string::npos);
    CHECK(report.shard_bytes[0] == init.model->shard_bytes());
    CHECK(init_report_json(report).find("\"peak_growth_bytes\"") != std::string::npos);
  } else {
    CHECK(report.ranks.empty());
  }
}

TEST_CASE("save: a sharded model saved unit by unit loads back bit-identically, and in transformers",
          "[mpi][init][save]") {
  const std::string source = kFixtures + "/qwen3";
  InitResult init = staged_init(config_for(source, true), g_me, *g_comm);
  const fs::path out = fs::temp_directory_path() / ("areal_saved_np" + std::to_string(g_me.world_size));
  save_sharded_checkpoint(*init.model, *g_comm, out.string(), at::kFloat, /*max_shard_bytes=*/30000);
  if (g_me.rank == 0) {
    io::CheckpointReader saved(out.string()), original(source);
    CHECK(saved.names() == original.names());
    for (const auto& name : original.names()) {
      INFO(name);
      CHECK(at::equal(saved.read(name), original.read(name)));
    }
    CHECK(fs::exists(out / "model.safetensors.index.json"));
    PythonResult python = run_python("check_hf_load.py " + out.string() + " " + source + "/reference.safetensors");
    INFO(python.output);
    CHECK(python.exit_code == 0);
    fs::remove_all(out);
  }
  g_comm->barrier();  // rank 0 is done with the files before the next test
}
