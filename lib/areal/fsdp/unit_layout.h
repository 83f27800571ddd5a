// How a model's parameters are grouped into FSDP units and laid out in each unit's
// flat buffer. Pure bookkeeping from the skeleton's names and shapes: no storage.
//
// One unit per decoder layer (`model.layers.<i>.*`), plus a root unit for the
// embeddings, the final norm and the head (tied weights are one parameter, so they
// live in one unit). A unit's flat buffer holds its parameters back to back, padded
// with zeros to a multiple of the world size; rank r owns elements
// [r * shard_numel, (r + 1) * shard_numel).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "areal/model/transformer.h"

namespace areal {

struct ParamSlot {
  std::string name;            // Hugging Face name
  std::vector<int64_t> shape;
  int64_t offset = 0;          // first element in the unit's flat buffer
  int64_t numel = 0;
};

struct UnitLayout {
  std::string name;            // "root" or "layers.<i>"
  std::vector<ParamSlot> params;
  int64_t numel = 0;           // parameters only
  int64_t padded_numel = 0;    // a multiple of the world size
  int64_t shard_numel = 0;     // padded_numel / world_size

  int64_t shard_begin(int rank) const { return rank * shard_numel; }  // in the flat buffer
};

// Units in forward order: root first (embeddings), then the layers in order.
std::vector<UnitLayout> plan_units(const CausalLM& skeleton, int world_size);

}  // namespace areal
