// libFuzzer target for the safetensors header parser: any byte string is either
// accepted or refused with CheckpointError; anything else (a crash, a sanitizer
// report, another exception) is a bug. Built and run by run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "areal/io/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view file(reinterpret_cast<const char*>(data), size);
  try {
    uint64_t length = areal::io::parse_header_length(file.substr(0, 8), size, "fuzz.safetensors");
    auto header = areal::io::parse_header(file.substr(8, length), size, "fuzz.safetensors");
    for (const auto& t : header.tensors)  // accepted spans must lie inside the input
      if (t.begin > t.end || t.end > size) __builtin_trap();
  } catch (const areal::io::CheckpointError&) {
  }
  return 0;
}
