// The safetensors header: parsed and checked in full before any tensor byte is read.
// No torch here, so the fuzz target (tests/fuzz) builds it alone.
//
// File layout: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data; offsets are relative to the first data byte.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace areal::io {

// A damaged or unsupported checkpoint file; the message names the file and the tensor.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

std::string dtype_name(DType dtype);       // "F32"
size_t dtype_size(DType dtype);            // bytes per element

struct TensorEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // absolute file offsets of the tensor's bytes
  uint64_t end = 0;
  int64_t numel() const;
};

struct SafetensorsHeader {
  uint64_t data_start = 0;  // 8 + header length
  std::vector<TensorEntry> tensors;  // in file order (by offset)
  std::map<std::string, std::string> metadata;
};

// Largest header accepted (the reference implementation's limit).
inline constexpr uint64_t kMaxHeaderBytes = 100u << 20;

// Parses the header length from the first 8 bytes. `file_size` bounds it.
uint64_t parse_header_length(std::string_view first8, uint64_t file_size, const std::string& file);

// Parses and checks the JSON header: every dtype known, shape x dtype size equal to
// the byte span, spans inside the data, spans not overlapping.
SafetensorsHeader parse_header(std::string_view json, uint64_t file_size, const std::string& file);

}  // namespace areal::io
