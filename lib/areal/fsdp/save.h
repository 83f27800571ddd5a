// Saving a sharded model as a Hugging Face checkpoint, one unit at a time: each unit is
// gathered, written by rank 0 and freed, so the whole model is never in any rank's
// memory. Collective: every rank calls it.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "areal/config/config.h"
#include "areal/dist/communicator.h"
#include "areal/fsdp/sharded_model.h"

namespace areal {

// Writes `dir` (config.json + safetensors, sharded at `max_shard_bytes`) with the
// weights in `dtype` (float32: bit-identical to the master shards). With
// `merge_adapters` and LoRA, each adapted weight is written as W + scale * B A (a
// standalone model that needs no PEFT). `extra_files(temp_dir)` runs on rank 0 to add
// files before the swap. Atomic: see io::write_checkpoint. Returns on every rank once
// rank 0 has finished.
void save_sharded_checkpoint(const ShardedModel& model, Communicator& comm, const std::string& dir,
                             at::ScalarType dtype, uint64_t max_shard_bytes = uint64_t{5} << 30,
                             bool merge_adapters = false,
                             const std::function<void(const std::string& temp_dir)>& extra_files = {});

// What a training job leaves in `dir`: the weights as a float32 HF checkpoint, with
// LoRA also the PEFT adapters and (saver.merge_lora) `<dir>-merged`, and the tokenizer
// files of cfg.model_path, so the checkpoint is a complete Hugging Face model; all of
// it is in place before the directory is swapped in (crash-safe). Collective.
void save_trained_model(const Config& cfg, const ShardedModel& model, Communicator& comm, const std::string& dir);

}  // namespace areal
