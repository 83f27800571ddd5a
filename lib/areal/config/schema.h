// The option schema: one declaration per option (schema.cpp), from which YAML
// loading, CLI overrides, --help, --print-config and docs/cli_reference.md derive.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "areal/config/config.h"

namespace areal {

enum class OptionType { Bool, Int, Float, String, StringList, IntList };

// A value as it arrives from YAML or the command line, before typing: one scalar
// or a list of items, each still text. `origin` says where it came from
// ("run.yaml:12:3", "command line") for error messages.
struct RawValue {
  std::vector<std::string> items;
  bool is_list = false;
  std::string origin;
};

struct OptionSpec {
  std::string name;  // dotted; equal to the member path in Config
  OptionType type;
  std::string doc;
  std::vector<std::string> choices;   // allowed values of a String option (empty: any)
  std::optional<double> min;          // inclusive bounds of Int/Float options
  std::optional<double> max;
  bool min_exclusive = false;         // `min` itself is not allowed
  bool minus_infinity_is_none = false;  // a Float whose `-inf` (its default) is AReaL's None: no bound
  std::string not_implemented;        // non-empty: the missing feature; a non-default value is refused

  // Types, range-checks and stores `value` into cfg; throws ConfigError naming
  // the option and the value's origin.
  std::function<void(Config&, const RawValue&)> assign;
  // The current value, formatted as text (lists as "[a, b]"); parses back to itself.
  std::function<std::string(const Config&)> format;
  // The current value as items (one for scalars).
  std::function<std::vector<std::string>(const Config&)> items;
};

// Every option, in declaration order (groups are contiguous).
const std::vector<OptionSpec>& option_schema();

// The option named `name`, or nullptr.
const OptionSpec* find_option(const std::string& name);

// "did you mean" text for an unknown name: " (did you mean 'x'?)" or "".
std::string suggest_option(const std::string& name);

std::string type_name(OptionType type);

// The allowed values or range of an option, as text ("one of a, b", ">= 0", "").
std::string describe_constraint(const OptionSpec& spec);

}  // namespace areal
