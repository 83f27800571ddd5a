// How a model's parameters are grouped into FSDP units and laid out in each unit's
// flat buffer. Pure bookkeeping from the skeleton's names and shapes: no storage.
//
// Units in forward order: the embedding ("embed"), one unit per decoder layer
// ("layers.<i>", `model.layers.<i>.*`), then the final norm and the head ("head"), so
// neither end gathers the other's weights. A head tied to the embedding is one
// parameter, so then the embedding, the final norm and the head are one unit ("root",
// first). A unit's flat buffer holds its parameters back to back, padded
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
  std::string name;            // "embed", "layers.<i>", "head" (or "root" when tied)
  std::vector<ParamSlot> params;
  int64_t numel = 0;           // parameters only
  int64_t padded_numel = 0;    // a multiple of the world size
  int64_t shard_numel = 0;     // padded_numel / world_size

  int64_t shard_begin(int rank) const { return rank * shard_numel; }  // in the flat buffer
};

// The units of `skeleton` in forward order (above).
std::vector<UnitLayout> plan_units(const CausalLM& skeleton, int world_size);

}  // namespace areal
