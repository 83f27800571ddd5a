#include "areal/config/cli.h"

#include <CLI/CLI.hpp>

#include <map>

#include "areal/config/areal_compat.h"
#include "areal/config/schema.h"
#include "areal/util/error.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

// `fsdp.memory_efficient_load=true` (no dashes) is how Hydra users write overrides;
// rewrite it to `--fsdp.memory_efficient_load=true` so one parser sees one spelling.
std::vector<std::string> normalize_arguments(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    size_t eq = arg.find('=');
    bool bare_assignment = !arg.empty() && arg[0] != '-' && eq != std::string::npos && eq > 0 &&
                           arg.substr(0, eq).find_first_of(" /") == std::string::npos;
    // A bare key=value is only an override when it does not follow a flag that takes a value.
    bool is_value_of_previous = !args.empty() && starts_with(args.back(), "--") &&
                                args.back().find('=') == std::string::npos && args.back() != "--print-config" &&
                                args.back() != "--help" && args.back() != "--cli-reference";
    if (bare_assignment && !is_value_of_previous) arg = "--" + arg;
    // `--key=` (an empty value): CLI11 would take the next argument as the value.
    if (starts_with(arg, "--") && !arg.empty() && arg.back() == '=') {
      args.push_back(arg.substr(0, arg.size() - 1));
      args.push_back("");
      continue;
    }
    args.push_back(arg);
  }
  return args;
}

std::string key_of(const std::string& arg) {
  std::string key = arg.substr(arg.find_first_not_of('-'));
  return key.substr(0, key.find('='));
}

// AReaL's spellings (`actor.path`, `actor.fsdp.memory_efficient_load`) and its keys that
// areal-train ignores or refuses are not CLI11 options: take them out of `args` as
// overrides, which the loader maps exactly as it maps the same keys in a YAML file.
std::vector<Override> take_areal_spellings(std::vector<std::string>& args) {
  std::vector<Override> taken;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (!starts_with(arg, "--") || arg.size() <= 2) {
      rest.push_back(arg);
      continue;
    }
    const std::string key = key_of(arg);
    const bool areal = !find_option(key) && (find_option(canonical_option_name(key)) || listed_areal_key(key));
    if (!areal) {
      rest.push_back(arg);
      continue;
    }
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      taken.push_back({key, arg.substr(eq + 1)});
    } else if (i + 1 < args.size()) {
      taken.push_back({key, args[++i]});
    } else {
      throw ConfigError(cat("command line: '", key, "' needs a value"));
    }
  }
  args = std::move(rest);
  return taken;
}

}  // namespace

CommandLine parse_command_line(int argc, const char* const* argv) {
  CommandLine result;
  const Config defaults;
  CLI::App app{"areal-train: distributed RL fine-tuning of LLMs (FSDP, GRPO/PPO)", "areal-train"};
  app.allow_extras();  // unknown options are reported by us, with a suggestion
  app.get_formatter()->column_width(48);
  app.footer("Every option also works in YAML (--config) and as key=value. See docs/cli_reference.md.");
  app.add_option("--config", result.config_path, "YAML file with options (defaults < file < command line)")
      ->type_name("FILE");
  app.add_flag("--print-config", result.print_config, "Print the merged config as YAML and exit");
  app.add_flag("--cli-reference", result.cli_reference, "Print docs/cli_reference.md and exit");

  // One CLI11 option per schema option; values stay text here and are typed by the schema.
  std::map<std::string, std::string> values;
  std::vector<std::pair<std::string, CLI::Option*>> options;
  for (const auto& spec : option_schema()) {
    std::string constraint = describe_constraint(spec);
    std::string doc = spec.doc + (constraint.empty() ? "" : " [" + constraint + "]") +
                      (spec.not_implemented.empty() ? "" : " (not implemented yet: default only)");
    CLI::Option* opt = app.add_option("--" + spec.name, values[spec.name], doc)
                           ->type_name(type_name(spec.type))
                           ->default_str(spec.format(defaults))
                           ->group(spec.name.find('.') == std::string::npos
                                       ? "Run options"
                                       : spec.name.substr(0, spec.name.find('.')) + ".* options");
    options.emplace_back(spec.name, opt);
  }

  std::vector<std::string> args = normalize_arguments(argc, argv);
  const std::vector<Override> areal_spellings = take_areal_spellings(args);
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments reversed
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    result.help = true;
    result.help_text = app.help();
    return result;
  } catch (const CLI::ArgumentMismatch& e) {
    throw ConfigError(cat("command line: ", e.what(), " (an option was given twice, or without a value)"));
  } catch (const CLI::ParseError& e) {
    throw ConfigError(cat("command line: ", e.what()));
  }

  for (const auto& extra : app.remaining()) {
    if (!starts_with(extra, "-"))
      throw ConfigError(cat("command line: unexpected argument '", extra,
                            "' (options are --name value, --name=value or name=value)"));
    std::string key = key_of(extra);
    throw ConfigError(cat("command line: '", key, "' is not an option", suggest_option(key)));
  }

  // CLI11 keeps no order across options; each option may appear once, so order
  // among different options does not change the result.
  for (const auto& [name, opt] : options)
    if (opt->count() > 0) result.overrides.push_back({name, values[name]});
  // The same option under two spellings is given twice, as CLI11 says for one spelling.
  for (const Override& o : areal_spellings) {
    const std::string name = canonical_option_name(o.key);
    for (const Override& other : result.overrides)
      if (canonical_option_name(other.key) == name && find_option(name))
        throw ConfigError(cat("command line: option '", name, "' given twice (as '", other.key, "' and '", o.key,
                              "')"));
    result.overrides.push_back(o);
  }
  return result;
}

}  // namespace areal
