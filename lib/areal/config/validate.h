// Rules across options, checked once the whole config is known and before any
// device or collective is touched.
#pragma once

#include <string>
#include <vector>

#include "areal/config/config.h"

namespace areal {

// Throws ConfigError naming the options involved and why the combination is refused.
// Checks: memory_efficient_load with init_from_scratch, model_path presence,
// allocation_mode syntax, and options of features that do not exist yet.
void validate_config(const Config& cfg);

// Combinations AReaL accepts with a warning (decoupled loss without a filter, a filter
// without the decoupled loss): one line each, for rank 0 to log.
std::vector<std::string> config_warnings(const Config& cfg);

}  // namespace areal
