// The areal-train command line: the few program flags, plus every schema option
// as an override in any of three spellings:
//   --fsdp.memory_efficient_load true
//   --fsdp.memory_efficient_load=true
//   fsdp.memory_efficient_load=true
#pragma once

#include <string>
#include <vector>

#include "areal/config/loader.h"

namespace areal {

struct CommandLine {
  std::string config_path;          // --config
  bool print_config = false;        // --print-config
  bool cli_reference = false;       // --cli-reference
  bool help = false;                // -h / --help
  std::string help_text;            // filled when help is asked for
  std::vector<Override> overrides;  // in command-line order
};

// Throws ConfigError for an unknown option (suggesting the closest name), a flag
// without its value, or the same option given twice.
CommandLine parse_command_line(int argc, const char* const* argv);

}  // namespace areal
