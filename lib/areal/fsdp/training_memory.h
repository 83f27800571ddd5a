// What one training rank needs at least, known before anything loads: the check that
// refuses a training shape that cannot fit, naming the numbers (docs/training.md).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "areal/model/model_config.h"

namespace areal {

// One micro-batch's shape on a rank: `tokens` of every sequence's (its chunk with context
// parallelism) in `rows` rows.
struct TrainingShape {
  int64_t world = 1;    // the ranks the shards are spread over
  int64_t tokens = 0;   // tokens a rank runs in one micro-batch (rows x length / c)
  at::ScalarType dtype = at::kFloat;  // actor.dtype
  bool checkpointing = false;         // actor.gradient_checkpointing
  bool lora = false;                  // the base frozen: its shards alone (4 bytes a parameter)
  int64_t tensor = 1;                 // actor.backend's t: heads, channels and vocabulary over t ranks
};

// A lower bound of one rank's training memory: its float32 shards of the weights with
// their gradients and AdamW's two moments (16 bytes a parameter / world; 4 with LoRA's
// frozen base, the adapters left out), two gathered
// units in the compute dtype (the one running and the one prefetched), the activations
// the layers keep (activations kept: per token and layer the inputs of the linear layers,
// 4 x hidden + 3 x intermediate values; recomputed: each layer's input) and the
// logits of the micro-batch's tokens in float32 (with tensor parallelism the activations
// and logits over t).
int64_t training_memory_bytes(const ModelConfig& config, int64_t parameters, int64_t largest_unit,
                              const TrainingShape& shape);

}  // namespace areal
