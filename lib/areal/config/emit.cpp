#include "areal/config/emit.h"

#include <yaml-cpp/yaml.h>

#include <sstream>

#include "areal/config/schema.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

std::string group_of(const std::string& name) {
  size_t dot = name.rfind('.');
  return dot == std::string::npos ? "" : name.substr(0, dot);
}

std::vector<std::string> path_of(const std::string& group) {
  return group.empty() ? std::vector<std::string>{} : split(group, '.');
}

}  // namespace

std::string config_to_yaml(const Config& cfg) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::vector<std::string> open;  // the nested groups currently open
  for (const auto& spec : option_schema()) {
    std::vector<std::string> want = path_of(group_of(spec.name));
    size_t common = 0;
    while (common < open.size() && common < want.size() && open[common] == want[common]) ++common;
    for (size_t i = open.size(); i > common; --i) out << YAML::EndMap;
    open.resize(common);
    for (size_t i = common; i < want.size(); ++i) {
      out << YAML::Key << want[i] << YAML::Value << YAML::BeginMap;
      open.push_back(want[i]);
    }
    out << YAML::Key << spec.name.substr(spec.name.rfind('.') + 1) << YAML::Value;
    bool is_list = spec.type == OptionType::StringList || spec.type == OptionType::IntList;
    if (is_list) {
      out << YAML::Flow << YAML::BeginSeq;
      for (const auto& item : spec.items(cfg)) out << item;
      out << YAML::EndSeq;
    } else if (spec.type == OptionType::String) {
      out << YAML::DoubleQuoted << spec.items(cfg)[0];
    } else {
      out << spec.items(cfg)[0];
    }
  }
  for (size_t i = open.size(); i > 0; --i) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::string cli_reference_markdown() {
  const Config defaults;
  std::ostringstream md;
  md << "# areal-train command-line and YAML reference\n\n"
     << "<!-- Generated from lib/areal/config/schema.cpp by `areal-train --cli-reference`; do not edit.\n"
     << "     Regenerate with scripts/gen_docs.sh. A test fails when this file is stale. -->\n\n"
     << "Every option can be set in the YAML file given with `--config` (nested maps:\n"
     << "`fsdp: {memory_efficient_load: true}`) and on the command line in any of three spellings:\n"
     << "`--fsdp.memory_efficient_load true`, `--fsdp.memory_efficient_load=true`,\n"
     << "`fsdp.memory_efficient_load=true`. The command line wins over the file, the file over\n"
     << "the defaults. String values may refer to other options as `${dotted.key}`. List values\n"
     << "are YAML sequences, or `a,b` / `[a,b]` on the command line.\n\n"
     << "| flag | meaning |\n|---|---|\n"
     << "| `--config FILE` | YAML file with options |\n"
     << "| `--print-config` | print the merged config as YAML and exit |\n"
     << "| `--cli-reference` | print this page and exit |\n"
     << "| `-h`, `--help` | list the options and exit |\n\n"
     << "Exit codes: 0 success, 1 failure while running, 2 bad command line or config (nothing started).\n";
  std::string current_group = "\x01";
  for (const auto& spec : option_schema()) {
    std::string top = spec.name.find('.') == std::string::npos ? "" : spec.name.substr(0, spec.name.find('.'));
    if (top != current_group) {
      current_group = top;
      md << "\n## " << (top.empty() ? "Run" : "`" + top + ".*`") << "\n\n"
         << "| option | type | default | allowed | description |\n|---|---|---|---|---|\n";
    }
    std::string constraint = describe_constraint(spec);
    std::string doc = spec.doc;
    if (!spec.not_implemented.empty()) doc += " *Not implemented yet: only the default is accepted.*";
    std::string value = spec.format(defaults);
    md << "| `" << spec.name << "` | " << type_name(spec.type) << " | `" << (value.empty() ? "\"\"" : value) << "` | "
       << constraint << " | " << doc << " |\n";
  }
  return md.str();
}

}  // namespace areal
