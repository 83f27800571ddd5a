// The training memory bound checked before anything loads (fsdp/training_memory.h),
// against the same sum written out here for a model's shapes.
#include "catch_with_torch.h"

#include "areal/fsdp/training_memory.h"

using namespace areal;

TEST_CASE("training memory: shards, two units, kept activations and logits per rank", "[training][memory]") {
  ModelConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 176;
  c.num_hidden_layers = 3;
  c.vocab_size = 500;
  const int64_t parameters = 100'000, unit = 20'000;
  TrainingShape shape;
  shape.world = 4;
  shape.tokens = 256;
  const int64_t logits = 256 * 500 * 4;
  // float32: 16 bytes a parameter / 4 ranks, 2 units x 4 bytes, (4 x 64 + 3 x 176) values x 4 bytes per token and layer.
  CHECK(training_memory_bytes(c, parameters, unit, shape) ==
        25'000 * 16 + 2 * 20'000 * 4 + 256 * 3 * (4 * 64 + 3 * 176) * 4 + logits);
  // bfloat16 with recompute: each layer keeps its input only; LoRA: the frozen base's shards.
  shape.dtype = at::kBFloat16;
  shape.checkpointing = true;
  shape.lora = true;
  CHECK(training_memory_bytes(c, parameters, unit, shape) == 25'000 * 4 + 2 * 20'000 * 2 + 256 * 3 * 64 * 2 + logits);
  // A mixture of experts: each token's k experts' channels instead of the dense MLP's.
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 32;
  shape.checkpointing = false;
  CHECK(training_memory_bytes(c, parameters, unit, shape) ==
        25'000 * 4 + 2 * 20'000 * 2 + 256 * 3 * (4 * 64 + 3 * 64) * 2 + logits);
  // Context parallelism is fewer tokens per rank: the caller's c divides them.
  shape.tokens = 64;
  CHECK(training_memory_bytes(c, parameters, unit, shape) < training_memory_bytes(c, parameters, unit, TrainingShape{4, 256, at::kBFloat16, false, true}));
}
