// Text derived from the schema: the merged config as YAML, and the CLI reference.
#pragma once

#include <string>

#include "areal/config/config.h"

namespace areal {

// The whole config as nested YAML (every option, in schema order). Loading it
// back with --config gives the same config, and printing that gives the same text.
std::string config_to_yaml(const Config& cfg);

// docs/cli_reference.md: every option with its type, default, allowed values and doc.
std::string cli_reference_markdown();

}  // namespace areal
