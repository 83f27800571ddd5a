// Reading and writing safetensors files, one tensor at a time.
//
// Reading validates the whole header first (safetensors_header.h), then reads each
// tensor with pread from its own byte span, so reading one tensor touches no other
// tensor's bytes and a checkpoint larger than memory can be streamed.
// Writing goes to `<path>.tmp-<pid>` and is renamed into place only when complete,
// so a crash never leaves a half-written file under the final name.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "areal/io/safetensors_header.h"

namespace areal::io {

at::ScalarType to_scalar_type(DType dtype);
DType from_scalar_type(at::ScalarType type);  // throws CheckpointError for unsupported types

class SafetensorsReader {
 public:
  // Opens `path` and validates its header; throws CheckpointError naming the file.
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(SafetensorsReader&& other) noexcept;
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorEntry>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const TensorEntry* find(const std::string& name) const;  // nullptr when absent

  // The tensor as stored (dtype and shape from the header), on the CPU.
  at::Tensor read(const std::string& name) const;
  // Reads into `out` (any dtype, CPU, contiguous, same number of elements),
  // converting from the stored dtype.
  void read_into(const std::string& name, at::Tensor& out) const;
  // Elements [first, first + out.numel()) of the flattened tensor into `out` (CPU,
  // contiguous), converted to out's dtype: a slice without reading the rest.
  void read_range_into(const std::string& name, int64_t first, at::Tensor& out) const;

 private:
  const TensorEntry& entry(const std::string& name) const;
  std::string path_;
  int fd_ = -1;
  SafetensorsHeader header_;
};

// What a tensor will be, for writers that receive the data later.
struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t bytes() const;
};

// Streams tensors into a new safetensors file: the header is written first from the
// specs, then each tensor in spec order, then finish() renames the file into place.
// Destroyed without finish(), it removes its temporary file.
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, std::vector<TensorSpec> specs,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  // `tensor` must be the next spec's (name, shape); it is converted to the spec's dtype.
  void write(const std::string& name, const at::Tensor& tensor);
  void finish();

 private:
  std::string path_;
  std::string temp_path_;
  std::vector<TensorSpec> specs_;
  size_t next_ = 0;
  int fd_ = -1;
};

// Writes `tensors` (CPU or not; converted to their own dtype's safetensors type).
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace areal::io
