#include "areal/fsdp/training_memory.h"

#include <c10/core/ScalarType.h>

namespace areal {

int64_t training_memory_bytes(const ModelConfig& c, int64_t parameters, int64_t largest_unit,
                              const TrainingShape& shape) {
  const int64_t dtype_bytes = static_cast<int64_t>(c10::elementSize(shape.dtype));
  const int64_t shards = (parameters + shape.world - 1) / shape.world * (shape.lora ? 4 : 16);
  const int64_t units = 2 * largest_unit * dtype_bytes;
  const int64_t mlp = c.num_experts > 0 ? c.moe_intermediate_size * c.num_experts_per_tok : c.intermediate_size;
  // Tensor parallelism splits the heads, channels and vocabulary (the hidden states stay
  // whole on every rank, so this stays a lower bound).
  const int64_t t = shape.tensor;
  const int64_t per_token_layer = shape.checkpointing ? c.hidden_size : 4 * c.hidden_size / t + 3 * mlp / t;
  const int64_t activations = shape.tokens * c.num_hidden_layers * per_token_layer * dtype_bytes;
  const int64_t logits = shape.tokens * ((c.vocab_size + t - 1) / t) * 4;
  return shards + units + activations + logits;
}

}  // namespace areal
