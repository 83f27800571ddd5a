// `allocation_mode`: how the ranks of a job are used.
#pragma once

#include <cstdint>
#include <string>

namespace areal {

struct AllocationMode {
  bool is_static = true;     // every rank trains and generates
  int64_t data_parallel = 0; // N of `fsdp:dN` / `dN`; 0 for static
};

// Parses `static`, `fsdp:dN` or `dN` (AReaL's training-side spelling); throws
// ConfigError for anything else, saying which spellings exist.
AllocationMode parse_allocation_mode(const std::string& text);

// Throws ConfigError when the mode asks for a different number of ranks than
// the job has.
void check_allocation_against_world(const AllocationMode& mode, const std::string& text, int world_size);

}  // namespace areal
