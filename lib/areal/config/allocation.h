// How the ranks of a job are used: the generation shape (`rollout.backend`) and the
// training shape (`actor.backend`), in AReaL's spellings, or AReaL's deprecated
// `allocation_mode` that names both ("sglang:d2t4+fsdp:d8").
#pragma once

#include <cstdint>
#include <string>

#include "areal/config/config.h"

namespace areal {

// One engine's shape: `engine:dDtTpPeE` (any order of the dimensions; absent = 1).
struct EngineShape {
  std::string engine;  // "areal", "sglang", "vllm" (generation); "fsdp" (training); "" when not given
  int64_t data = 0;    // D replicas; 0 when not given (every rank)
  int64_t tensor = 1;  // T ranks per replica (training: each layer split over T ranks, tensor parallelism)
  // A mixture of experts' experts computed by groups of E ranks (expert parallelism, AReaL's
  // `e`, folded into the ranks, not added to them): in training E of the D ranks; in
  // generation E = T, experts whole on the group's ranks (1: each expert split over T).
  int64_t expert = 1;
  // Training only: every sequence split over groups of C ranks (context parallelism,
  // AReaL's `c`); D groups of C ranks train.
  int64_t context = 1;
  int64_t ranks() const { return data * tensor * context; }
  // Training: the ranks that share each row of a batch (a data-parallel group: T x C).
  int64_t sharing() const { return tensor * context; }
};

struct Allocation {
  EngineShape rollout;  // engine "" when generation follows the training ranks with t = 1
  EngineShape actor;
  // Set once the world size is known (check_allocation_against_world).
  int64_t tensor_parallel() const { return rollout.tensor; }
  // Separate groups (asynchronous RL): ranks [0, generation_ranks()) only generate, the
  // others only train. Colocated: every rank does both.
  bool separate = false;
  int64_t generation_ranks() const { return separate ? rollout.ranks() : 0; }
  // Whether world rank `rank` trains (holds FSDP shards).
  bool trains(int rank) const { return rank >= generation_ranks(); }
};

// Parses `text` as option `option`'s shape; throws ConfigError naming the option.
EngineShape parse_engine_shape(const std::string& text, const std::string& option, bool generation);

// The job's shapes from rollout.backend, actor.backend and allocation_mode; throws
// ConfigError for a bad spelling or when allocation_mode disagrees with a backend.
Allocation parse_allocation(const Config& cfg);

// Fills in the shapes left to the world size and throws ConfigError when the shapes
// ask for a different number of ranks than the job has. Shapes that each cover the
// world are colocated; generation and training ranks that add up to it are separate.
void check_allocation_against_world(Allocation& allocation, int world_size);

// Both of the above: the job's shapes for `world_size` ranks (what bootstrap checks,
// the RL loop and the job checks use).
Allocation allocation_for_world(const Config& cfg, int world_size);

// The placement, for the start-up log: "generation: 1 replica x 2 tensor-parallel
// ranks; training: FSDP over 2 ranks; colocated" (or "separate: ranks 0-1 generate,
// ranks 2-3 train").
std::string describe_allocation(const Allocation& allocation);

}  // namespace areal
