// Moving a CausalLM's weights to and from Hugging Face checkpoints.
#pragma once

#include <memory>
#include <string>

#include "areal/io/checkpoint.h"
#include "areal/model/transformer.h"

namespace areal {

// Checks, without reading any tensor data, that the checkpoint holds exactly the
// model's parameters with their shapes (the rules of load_hf_weights). `model` may be
// a meta-device skeleton.
void check_hf_weights(const CausalLM& model, const io::CheckpointReader& checkpoint);

// Strict: every parameter of `model` must be in the checkpoint exactly once with its
// shape; a checkpoint tensor the model does not have is an error too. The one
// exception: with tied embeddings, `lm_head.weight` may be absent (or present; it is
// then ignored, as transformers does). Errors name the tensor and the file.
// Values are converted to the parameters' dtype; parameters must be on the CPU.
void load_hf_weights(CausalLM& model, const io::CheckpointReader& checkpoint);

// A model on the CPU in `dtype`, built from the checkpoint's config.json and loaded.
std::shared_ptr<CausalLM> load_causal_lm(const std::string& path, at::ScalarType dtype);

// config.json (as read) plus the weights in their own dtype, sharded at
// `max_shard_bytes`, written atomically (see io::write_checkpoint).
void save_hf_checkpoint(const CausalLM& model, const std::string& dir, uint64_t max_shard_bytes = uint64_t{5} << 30);

}  // namespace areal
