// One unit of a sharded model gathered as its named weights: what saving writes and
// what the rollout slices (through the Policy, policy.h). Only one unit is whole at a
// time on any rank.
#pragma once

#include <map>
#include <string>

#include "areal/dist/communicator.h"
#include "areal/fsdp/sharded_model.h"

namespace areal {

// Unit `u` gathered as its parameters by name (collective), in `dtype`; with
// `merge_adapters` and LoRA, adapted weights come as W + scale * B A (merged in float32).
std::map<std::string, at::Tensor> gather_unit_weights(const ShardedModel& model, Communicator& comm, size_t u,
                                                      at::ScalarType dtype, bool merge_adapters);

}  // namespace areal
