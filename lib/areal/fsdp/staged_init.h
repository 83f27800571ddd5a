// The staged initialization (DESIGN.md, "The flow of one run"): the stages
// cpu_skeleton -> fsdp_shard -> load (rank0_load + broadcast, or sliced_read) -> verify,
// each timed and its peak host-memory growth measured on every rank.
//
// Without fsdp.memory_efficient_load (AReaL's default), every rank opens the checkpoint
// and reads only the byte ranges of its own shard of every unit: no rank holds a whole
// tensor, unit or state dict, nothing is sent, and the ranks read in parallel. With it,
// rank 0 alone streams the checkpoint into one piece of a unit at a time and scatters
// it, so every rank receives only its shard (for a checkpoint only rank 0 can read, or a
// filesystem that punishes many readers). Both give bit-identical shards. With
// init_from_scratch, every rank generates each unit from the seed and keeps its slice:
// the same weights for every world size.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "areal/config/config.h"
#include "areal/dist/communicator.h"
#include "areal/fsdp/sharded_model.h"

namespace areal {

struct StageStats {
  std::string name;
  double seconds = 0;
  int64_t peak_growth_bytes = 0;  // host RSS high-water mark above the stage's start
};

struct InitResult {
  std::unique_ptr<ShardedModel> model;
  std::vector<StageStats> stages;
  double seconds = 0;                  // the whole init
  int64_t peak_growth_bytes = 0;       // the whole init: RSS high-water above the RSS before it
  std::string source;  // what was loaded ("checkpoint <path>", "seed 1")
};

// The model the init builds: model_path's config.json, or the built-in tiny model.
// Reads one small file; for the checks that run before the init. An unreadable or
// unsupported config.json (a mixture-of-experts model, ...) is a ConfigError naming it.
ModelConfig init_model_config(const Config& cfg);

// Collective over `comm`. A checkpoint that disagrees with the model (naming tensor and
// file), or that differs between ranks on the sliced path, is a ConfigError raised alike
// on every rank of `comm` with the first failing rank's message: the job ends with exit
// 2 (run_guarded), no rank waiting in a collective.
InitResult staged_init(const Config& cfg, const RankInfo& me, Communicator& comm);

// Unit `unit_index` of `layout` as init_from_scratch makes it (its whole padded flat
// buffer): a function of the seed and the unit only, never of the world size.
at::Tensor seeded_unit(const UnitLayout& layout, size_t unit_index, int64_t seed);

// Every rank's stage figures, gathered to rank 0.
struct InitReport {
  std::string source;
  std::vector<std::string> stage_names;
  std::vector<std::vector<StageStats>> ranks;  // [rank][stage]
  std::vector<double> seconds;                 // [rank] whole init
  std::vector<int64_t> peak_growth_bytes;      // [rank] whole init
  std::vector<int64_t> shard_bytes;            // [rank]
  int64_t largest_unit_bytes = 0;              // float32, padded
};

// Collective: complete on rank 0, empty elsewhere.
InitReport gather_init_report(const InitResult& result, Communicator& comm);
// The table rank 0 logs: one row per stage (slowest rank's time, each rank's peak growth).
std::string format_init_table(const InitReport& report);
// The same figures as JSON (written to <run dir>/init_stages.json by --job init).
std::string init_report_json(const InitReport& report);

}  // namespace areal
