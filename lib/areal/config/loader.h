// Building a Config from its three layers: defaults < YAML file < CLI overrides.
#pragma once

#include <string>
#include <vector>

#include "areal/config/config.h"

namespace areal {

// One `key=value` from the command line, in any of its spellings.
struct Override {
  std::string key;
  std::string value;
};

// Loads `yaml_path` (may be empty: defaults only), applies `overrides` in order,
// resolves `${dotted.key}` references and types every value. Throws ConfigError
// on the first problem, naming the option and the file:line:column it came from.
// Does not check cross-field rules: see validate_config().
Config load_config(const std::string& yaml_path, const std::vector<Override>& overrides);

// The same, from YAML text instead of a file (for tests); `source_name` stands in
// for the file name in messages.
Config load_config_text(const std::string& yaml_text, const std::string& source_name,
                        const std::vector<Override>& overrides);

// The keys of a YAML file that are neither options (in any spelling: aliases, AReaL's
// names) nor AReaL keys listed as ignored or refused (areal_compat.h), as the file
// spells them; empty for a file areal-train understands key for key. Values are not
// checked. Throws ConfigError for a file that does not parse.
std::vector<std::string> unlisted_keys(const std::string& yaml_path);

}  // namespace areal
