// Hugging Face checkpoints: a directory with config.json and either model.safetensors
// or model.safetensors.index.json plus its shards; or a single .safetensors file.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "areal/io/safetensors.h"

namespace areal::io {

class CheckpointReader {
 public:
  // Opens every file and validates every header and the index before any tensor is
  // read. Throws CheckpointError naming the directory, file and tensor at fault.
  explicit CheckpointReader(const std::string& path);

  // config.json of the checkpoint (for a single file: the one beside it).
  const std::string& config_path() const { return config_path_; }
  std::vector<std::string> names() const;  // every tensor, sorted
  bool contains(const std::string& name) const { return where_.count(name) > 0; }
  const TensorEntry& entry(const std::string& name) const;
  const std::string& file_of(const std::string& name) const;  // the shard holding `name`
  uint64_t total_bytes() const;

  at::Tensor read(const std::string& name) const;
  void read_into(const std::string& name, at::Tensor& out) const;
  void read_range_into(const std::string& name, int64_t first, at::Tensor& out) const;  // see SafetensorsReader

 private:
  const SafetensorsReader& reader_of(const std::string& name) const;
  std::string path_;
  std::string config_path_;
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, size_t> where_;  // tensor -> index into files_
};

// Writes a checkpoint directory: config.json (the given text), and the tensors of
// `specs` in order, each asked of `tensor_for` just before it is written, so a caller
// can produce them one at a time (never the whole model in memory). One file
// model.safetensors when everything fits in `max_shard_bytes`, else shards
// model-0000k-of-0000N.safetensors and model.safetensors.index.json (with total_size).
// `extra_files(temp_dir)` adds the caller's files (tokenizer, adapters) next to them.
// Everything goes to `<dir>.tmp-PID` first, is fsynced, and is swapped into place in
// one step, so after a crash at any instant `dir` holds either the previous complete
// checkpoint or the new complete one. Debris of saves whose process died (a crash) is
// removed first, with a log line.
void write_checkpoint(const std::string& dir, const std::string& config_json, const std::vector<TensorSpec>& specs,
                      const std::function<at::Tensor(const TensorSpec&)>& tensor_for,
                      uint64_t max_shard_bytes = uint64_t{5} << 30,
                      const std::function<void(const std::string& temp_dir)>& extra_files = {});

}  // namespace areal::io
