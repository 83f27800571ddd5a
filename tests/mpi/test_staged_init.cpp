// The staged initialization under mpirun -np 1..4: after loading, the gathered units
// equal the checkpoint's tensors exactly (both paths: rank-0 streaming and sliced reads;
// tied and untied, float32 and bfloat16, one file and sharded files), the two paths give
// bit-identical shards, every damaged checkpoint is refused alike on every rank on both
// paths, and init_from_scratch gives the same weights for every world size.
#include <ATen/ATen.h>
#include "catch_with_torch.h"
#include "run_python.h"
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "areal/fsdp/save.h"
#include "areal/fsdp/staged_init.h"
#include "areal/io/checkpoint.h"
#include "areal/util/error.h"
#include "areal/util/strings.h"
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

// Both paths on `path`: each equal to the checkpoint, and bit-identical to each other.
void check_both_paths(const std::string& path) {
  InitResult streamed = staged_init(config_for(path, true), g_me, *g_comm);
  InitResult sliced = staged_init(config_for(path, false), g_me, *g_comm);
  check_against_checkpoint(*streamed.model, path);
  check_against_checkpoint(*sliced.model, path);
  for (size_t u = 0; u < streamed.model->units().size(); ++u) {
    INFO(path << " unit " << u);
    CHECK(at::equal(streamed.model->shard(u), sliced.model->shard(u)));  // bit-identical paths
  }
}

std::vector<std::string> stage_names(const InitResult& init) {
  std::vector<std::string> names;
  for (const auto& s : init.stages) names.push_back(s.name);
  return names;
}

}  // namespace

TEST_CASE("staged init: gathered weights equal the checkpoint on both paths", "[mpi][init]") {
  for (const auto& name : {"qwen2_tied", "qwen2_untied", "qwen3", "llama_mha_bias", "qwen3_moe", "mixtral"})
    check_both_paths(kFixtures + "/" + name);
  // The stages are reported in order with their names: the sliced path sends nothing.
  const std::string path = kFixtures + "/qwen2_tied";
  CHECK(stage_names(staged_init(config_for(path, true), g_me, *g_comm)) ==
        std::vector<std::string>{"cpu_skeleton", "fsdp_shard", "rank0_load", "broadcast", "verify"});
  InitResult sliced = staged_init(config_for(path, false), g_me, *g_comm);
  CHECK(stage_names(sliced) == std::vector<std::string>{"cpu_skeleton", "fsdp_shard", "sliced_read", "verify"});
  CHECK_THAT(sliced.source, Catch::Matchers::Contains("sliced"));
}

TEST_CASE("staged init: sharded checkpoint files, float32 and bfloat16, tied and untied, on both paths",
          "[mpi][init]") {
  // Shards of ~20 kB: tensors of one unit spread over several files, and the reads of one
  // rank's shard cross file boundaries.
  const std::string tag = std::to_string(g_me.world_size);
  for (const auto& [name, dtype] : {std::pair{"qwen2_tied", at::kBFloat16}, std::pair{"qwen2_untied", at::kFloat}}) {
    const fs::path dir = fs::temp_directory_path() / cat("areal_sharded_", name, "_", tag);
    if (g_me.rank == 0) {
      fs::remove_all(dir);
      save_hf_checkpoint(*load_causal_lm(kFixtures + "/" + name, dtype), dir.string(), 20000);
    }
    g_comm->barrier();
    REQUIRE(fs::exists(dir / "model.safetensors.index.json"));
    check_both_paths(dir.string());
    g_comm->barrier();
    if (g_me.rank == 0) fs::remove_all(dir);
  }
}

namespace {

// Rewrites `file` with `edit` applied to its tensors (by name, in file order).
void rewrite_tensors(const fs::path& file,
                     const std::function<void(std::vector<std::pair<std::string, at::Tensor>>&)>& edit) {
  io::SafetensorsReader reader(file.string());
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& t : reader.tensors()) tensors.emplace_back(t.name, reader.read(t.name));
  edit(tensors);
  io::write_safetensors(file.string(), tensors);
}

void replace_in_file(const fs::path& file, const std::string& from, const std::string& to) {
  std::ifstream in(file);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = text.find(from);
  CHECK(at != std::string::npos);  // (no REQUIRE: rank 0 alone runs this while the others wait)
  if (at != std::string::npos) text.replace(at, from.size(), to);
  std::ofstream(file) << text;
}

// The index's weight map of a sharded checkpoint, edited in place.
void edit_weight_map(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  const fs::path file = dir / "model.safetensors.index.json";
  nlohmann::json index = nlohmann::json::parse(std::ifstream(file));
  edit(index["weight_map"]);
  std::ofstream(file) << index.dump(2);
}

// The shard files, in order.
std::vector<fs::path> shard_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".safetensors") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

// A copy of the llama fixture, written by rank 0 into a fresh folder, damaged by `damage`.
fs::path damaged_copy(const std::string& label, const std::function<void(const fs::path&)>& damage) {
  const fs::path dir = fs::temp_directory_path() / cat("areal_damaged_", label, "_", g_me.world_size);
  if (g_me.rank == 0) {
    fs::remove_all(dir);
    save_hf_checkpoint(*load_causal_lm(kFixtures + "/llama", at::kFloat), dir.string(), 20000);
    CHECK(shard_files(dir).size() == 5);  // the cases below name these files
    damage(dir);
  }
  g_comm->barrier();
  return dir;
}

}  // namespace

TEST_CASE("staged init: every damaged checkpoint is refused on every rank on both paths, naming what is wrong",
          "[mpi][init][errors]") {
  struct Case {
    std::string label;
    std::function<void(const fs::path&)> damage;
    std::vector<std::string> message;  // what the error must name
  };
  const std::vector<Case> cases = {
      {"shape",
       [](const fs::path& d) { replace_in_file(d / "config.json", "\"intermediate_size\": 48", "\"intermediate_size\": 40"); },
       {"model.layers.0.mlp.gate_proj.weight", "config.json implies [40, 32]"}},
      {"missing_tensor",  // gone from its file and from the index
       [](const fs::path& d) {
         const std::string name = "model.layers.0.mlp.down_proj.weight";
         std::string file;
         edit_weight_map(d, [&](nlohmann::json& map) {
           file = map.value(name, "");
           map.erase(name);
         });
         rewrite_tensors(d / file, [&](auto& t) {
           t.erase(std::remove_if(t.begin(), t.end(), [&](const auto& kv) { return kv.first == name; }), t.end());
         });
       },
       {"has no tensor 'model.layers.0.mlp.down_proj.weight'"}},
      {"index_names_what_a_file_lacks",
       [](const fs::path& d) {
         rewrite_tensors(d / "model-00002-of-00005.safetensors", [](auto& t) { t.erase(t.begin()); });
       },
       {"model-00002-of-00005.safetensors", "not in it"}},
      {"unexpected_tensor",
       [](const fs::path& d) {
         rewrite_tensors(d / "model-00001-of-00005.safetensors",
                         [](auto& t) { t.emplace_back("model.extra.weight", at::ones({2})); });
         edit_weight_map(d, [](nlohmann::json& map) { map["model.extra.weight"] = "model-00001-of-00005.safetensors"; });
       },
       {"unexpected tensor 'model.extra.weight'"}},
      {"missing_file", [](const fs::path& d) { fs::remove(d / "model-00005-of-00005.safetensors"); },
       {"model-00005-of-00005.safetensors", "missing"}},
      {"truncated",
       [](const fs::path& d) {
         const fs::path f = d / "model-00003-of-00005.safetensors";
         fs::resize_file(f, fs::file_size(f) - 4);
       },
       {"model-00003-of-00005.safetensors"}},
      {"no_config", [](const fs::path& d) { fs::remove(d / "config.json"); }, {"config.json"}},
  };
  for (const Case& c : cases) {
    const fs::path dir = damaged_copy(c.label, c.damage);
    for (bool memory_efficient : {true, false}) {
      INFO(c.label << ", memory_efficient_load " << memory_efficient);
      std::string message;
      try {
        staged_init(config_for(dir.string(), memory_efficient), g_me, *g_comm);
      } catch (const ConfigError& e) {
        message = e.what();
      }
      INFO(message);
      CHECK_THAT(message, Catch::Matchers::Contains("model_path"));
      for (const auto& part : c.message) CHECK_THAT(message, Catch::Matchers::Contains(part));
    }
    g_comm->barrier();
    if (g_me.rank == 0) fs::remove_all(dir);
  }
}

TEST_CASE("staged init: ranks that see different checkpoints under one path are refused on the sliced path",
          "[mpi][init][errors]") {
  if (g_me.world_size == 1) return;  // nothing to disagree with
  // The last rank reads a copy with another file layout: what a shared filesystem out of
  // sync shows one node.
  const fs::path copy = fs::temp_directory_path() / cat("areal_other_layout_", g_me.world_size);
  if (g_me.rank == 0) {
    fs::remove_all(copy);
    save_hf_checkpoint(*load_causal_lm(kFixtures + "/llama", at::kFloat), copy.string(), 20000);
  }
  g_comm->barrier();
  const bool last = g_me.rank == g_me.world_size - 1;
  std::string message;
  try {
    staged_init(config_for(last ? copy.string() : kFixtures + "/llama", false), g_me, *g_comm);
  } catch (const ConfigError& e) {
    message = e.what();
  }
  CHECK_THAT(message, Catch::Matchers::Contains(cat("rank ", g_me.world_size - 1, ": option 'model_path'")) &&
                          Catch::Matchers::Contains("not the same checkpoint on this rank as on rank 0"));
  g_comm->barrier();
  if (g_me.rank == 0) fs::remove_all(copy);
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
    // The tensors equal the transformers-made fixture's at every world size; transformers
    // reads the files (config, index, shards) at np 2, which saves 7 s per other np.
    if (g_me.world_size == 2) {
      PythonResult python = run_python("check_hf_load.py " + out.string() + " " + source + "/reference.safetensors");
      INFO(python.output);
      CHECK(python.exit_code == 0);
    }
    fs::remove_all(out);
  }
  g_comm->barrier();  // rank 0 is done with the files before the next test
}
