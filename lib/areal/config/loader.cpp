#include "areal/config/loader.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "areal/config/areal_compat.h"
#include "areal/config/schema.h"
#include "areal/util/error.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

// Option name -> its raw value, with the later layers replacing the earlier ones.
using Layer = std::map<std::string, RawValue>;

// The AReaL keys read and ignored (areal_compat.h): key -> its value's text (a
// scalar's, for ${references} to it) and why it is ignored.
struct IgnoredKeys {
  std::map<std::string, std::string> text;
  std::vector<std::string> notes;  // "key: why", in file order
  void add(const std::string& key, const YAML::Node& value, const std::string& why) {
    if (value.IsScalar()) text[key] = value.Scalar();
    notes.push_back(key + ": " + why);
  }
};

std::string mark_of(const std::string& source, const YAML::Mark& mark) {
  return cat(source, ":", mark.line + 1, ":", mark.column + 1);
}

// True when `prefix` is a group of options ("fsdp", "fsdp.wrap_policy").
bool is_group(const std::string& prefix) {
  for (const auto& spec : option_schema())
    if (starts_with(spec.name, prefix + ".")) return true;
  return false;
}

// AReaL's optional sections (a dataclass field that may be None): `null` turns the
// section off, and a section given takes AReaL's defaults for the switches it leaves out.
struct OptionalSection {
  std::vector<std::string> switches;  // the options that say whether it is on
  std::string off, on;                // their value for `null`, and for a section given
};
const OptionalSection* optional_section(const std::string& name) {
  static const OptionalSection norm{{".mean_level", ".std_level"}, "none", "batch"};  // NormConfig
  static const OptionalSection rejection{{".level"}, "none", "token"};               // RejectionSamplingConfig
  if (find_option(name + ".mean_level")) return &norm;  // actor.reward_norm, actor.adv_norm
  if (name == "actor.rejection_sampling") return &rejection;
  return nullptr;
}

// A value that turns nothing on: null or false (AReaL's `critic: null`, `use_sapo_loss: false`).
bool is_off(const YAML::Node& value) {
  if (value.IsNull()) return true;
  if (!value.IsScalar()) return false;
  const std::string text = value.as<std::string>();
  return text == "false" || text == "False" || text == "null" || text == "~";
}

// An AReaL key listed as refused or ignored (areal_compat.h), from a file or the command
// line (`where`): noted in `ignored` and true, or refused with why when it turns on
// something areal-train does not have; false when it is not listed. `off`: the value is
// null or false.
bool take_listed_key(const std::string& key, const YAML::Node& value, bool off, const std::string& where,
                     IgnoredKeys& ignored) {
  if (std::string why = refused_areal_key_reason(key); !why.empty()) {
    const std::string text = value.IsScalar() ? value.Scalar() : "";
    const bool same = !text.empty() && refused_areal_key_accepts(key, text);
    if (!off && !same) throw ConfigError(cat(where, ": '", key, "'", text.empty() ? "" : " = " + text, ": ", why));
    ignored.add(key, value, (same ? "what areal-train does; " : "off; ") + why);
    return true;
  }
  if (std::string why = ignored_areal_key_reason(key); !why.empty()) {
    ignored.add(key, value, why);
    return true;
  }
  return false;
}

// Walks nested YAML maps, turning `fsdp: {memory_efficient_load: true}` into
// "fsdp.memory_efficient_load" -> "true" with the position of the value.
// AReaL's spellings map onto the options (canonical_option_name), AReaL's keys of
// things areal-train does differently go to `ignored`, and `null` is AReaL's None: the
// option's default (`none` where that is a choice).
void flatten_yaml(const YAML::Node& node, const std::string& prefix, const std::string& areal_prefix,
                  const std::string& source, Layer& layer, IgnoredKeys& ignored) {
  for (const auto& entry : node) {
    const std::string key = entry.first.as<std::string>();
    const std::string written = areal_prefix.empty() ? key : areal_prefix + "." + key;  // as the file spells it
    const std::string name = canonical_option_name(prefix.empty() ? key : prefix + "." + key);
    const YAML::Node& value = entry.second;
    const std::string where = mark_of(source, entry.first.Mark());
    if (!find_option(name) && !is_group(name) && take_listed_key(written, value, is_off(value), where, ignored))
      continue;
    const OptionalSection* section = optional_section(name);
    if (value.IsNull() && section) {  // AReaL's `reward_norm: null`: no normalization
      for (const std::string& sw : section->switches)
        layer[name + sw] = RawValue{{section->off}, false, mark_of(source, value.Mark())};
      continue;
    }
    if (value.IsMap()) {
      if (!is_group(name)) {
        if (find_option(name))
          throw ConfigError(cat(where, ": option '", name, "' takes a ",
                                type_name(find_option(name)->type), " value, not a map"));
        throw ConfigError(cat(where, ": unknown group '", name, "'", suggest_option(name)));
      }
      flatten_yaml(value, name, written, source, layer, ignored);
      if (section)
        for (const std::string& sw : section->switches)
          if (!layer.count(name + sw)) layer[name + sw] = RawValue{{section->on}, false, where};
      continue;
    }
    if (!find_option(name)) {
      std::string what = is_group(name) ? "is a group of options and needs a map of them" : "is not an option";
      throw ConfigError(cat(where, ": '", name, "' ", what, suggest_option(name)));
    }
    RawValue raw;
    raw.origin = mark_of(source, value.Mark());
    const OptionSpec& spec = *find_option(name);
    const bool has_none = std::find(spec.choices.begin(), spec.choices.end(), "none") != spec.choices.end();
    if (value.IsNull() && has_none) {  // AReaL's `mean_level: null`
      raw.items.push_back("none");
      layer[name] = raw;
      continue;
    }
    if (value.IsNull() && null_means_default(name)) {  // AReaL's None: unset, the default
      raw.is_list = spec.type == OptionType::StringList || spec.type == OptionType::IntList;
      raw.items = spec.items(Config{});
    } else if (value.IsNull()) {
      throw ConfigError(cat(where, ": option '", name, "' has no value"));
    }
    else if (value.IsSequence()) {
      raw.is_list = true;
      for (const auto& item : value) {
        if (!item.IsScalar())
          throw ConfigError(cat(mark_of(source, item.Mark()), ": option '", name, "': list items must be scalars"));
        raw.items.push_back(item.Scalar());
      }
    } else {
      raw.items.push_back(value.Scalar());
    }
    // yaml-cpp keeps both of two equal keys; the later would win without a word.
    if (auto first = layer.find(name); first != layer.end())
      throw ConfigError(cat(where, ": option '", name, "' is set twice in this file (first at ",
                            first->second.origin, written == name ? ")" : cat("; here spelled '", written, "')")));
    layer[name] = raw;
  }
}

Layer read_yaml(const std::string& text, const std::string& source, IgnoredKeys& ignored) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(cat(mark_of(source, e.mark), ": malformed YAML: ", e.msg));
  }
  Layer layer;
  if (root.IsNull()) return layer;  // an empty file
  if (!root.IsMap()) throw ConfigError(cat(source, ": the top level must be a map of options"));
  flatten_yaml(root, "", "", source, layer, ignored);
  return layer;
}

// The keys under `node` that no option, alias or listed AReaL key accounts for.
void collect_unlisted(const YAML::Node& node, const std::string& prefix, const std::string& areal_prefix,
                      std::vector<std::string>& out) {
  for (const auto& entry : node) {
    const std::string key = entry.first.as<std::string>();
    const std::string written = areal_prefix.empty() ? key : areal_prefix + "." + key;
    const std::string name = canonical_option_name(prefix.empty() ? key : prefix + "." + key);
    if (find_option(name)) continue;
    if (listed_areal_key(written)) continue;
    if (is_group(name) && entry.second.IsMap()) collect_unlisted(entry.second, name, written, out);
    else if (!(is_group(name) && entry.second.IsNull())) out.push_back(written);
  }
}

// A CLI value is a list when its option is one: "a,b" or "[a, b]"; "[]" is empty.
RawValue raw_from_cli(const OptionSpec& spec, const std::string& value) {
  RawValue raw;
  raw.origin = "command line";
  bool list_type = spec.type == OptionType::StringList || spec.type == OptionType::IntList;
  if (!list_type) {
    raw.items.push_back(value);
    return raw;
  }
  raw.is_list = true;
  std::string body = trim(value);
  if (body.size() >= 2 && body.front() == '[' && body.back() == ']') body = trim(body.substr(1, body.size() - 2));
  if (!body.empty())
    for (const auto& item : split(body, ',')) raw.items.push_back(trim(item));
  return raw;
}

// ---- ${dotted.key} references ------------------------------------------------------

class Resolver {
 public:
  Resolver(Layer& layer, const IgnoredKeys& ignored) : layer_(layer), ignored_(ignored) {}

  void resolve_all() {
    for (auto& [name, raw] : layer_) resolve(name);
  }

 private:
  // The final text of a scalar option, resolving its own references first.
  std::string scalar_text(const std::string& written, const std::string& referrer, const std::string& origin) {
    const std::string name = canonical_option_name(written);
    const OptionSpec* spec = find_option(name);
    if (auto it = ignored_.text.find(written); !spec && it != ignored_.text.end()) return it->second;
    if (!spec)
      throw ConfigError(cat(origin, ": option '", referrer, "' refers to ${", name, "}, which is not an option",
                            suggest_option(name)));
    if (spec->type == OptionType::StringList || spec->type == OptionType::IntList)
      throw ConfigError(cat(origin, ": option '", referrer, "' refers to ${", name, "}, which is a list"));
    auto it = layer_.find(name);
    if (it == layer_.end()) return spec->format(Config{});  // not set: the default
    resolve(name);
    return it->second.items.at(0);
  }

  void resolve(const std::string& name) {
    if (done_.count(name)) return;
    if (std::find(stack_.begin(), stack_.end(), name) != stack_.end()) {
      std::vector<std::string> cycle(std::find(stack_.begin(), stack_.end(), name), stack_.end());
      cycle.push_back(name);
      throw ConfigError(cat(layer_.at(name).origin, ": option '", name, "': reference cycle ", join(cycle, " -> ")));
    }
    stack_.push_back(name);
    RawValue& raw = layer_.at(name);
    for (auto& item : raw.items) item = substitute(item, name, raw.origin);
    stack_.pop_back();
    done_.insert(name);
  }

  std::string substitute(const std::string& text, const std::string& name, const std::string& origin) {
    std::string out;
    size_t pos = 0;
    while (true) {
      size_t open = text.find("${", pos);
      if (open == std::string::npos) break;
      size_t close = text.find('}', open);
      if (close == std::string::npos)
        throw ConfigError(cat(origin, ": option '", name, "': unterminated reference in '", text, "'"));
      out += text.substr(pos, open - pos);
      out += scalar_text(trim(text.substr(open + 2, close - open - 2)), name, origin);
      pos = close + 1;
    }
    return out + text.substr(pos);
  }

  Layer& layer_;
  const IgnoredKeys& ignored_;
  std::vector<std::string> stack_;
  std::set<std::string> done_;
};

Config build(Layer layer, IgnoredKeys ignored, const std::vector<Override>& overrides) {
  for (const auto& o : overrides) {
    const std::string name = canonical_option_name(o.key);
    const OptionSpec* spec = find_option(name);
    if (!spec) {
      if (take_listed_key(o.key, YAML::Node(o.value), is_off(YAML::Load(o.value)), "command line", ignored)) continue;
      std::string what = is_group(o.key) ? "is a group, not an option" : "is not an option";
      throw ConfigError(cat("command line: '", o.key, "' ", what, suggest_option(o.key)));
    }
    layer[name] = raw_from_cli(*spec, o.value);
  }
  Resolver(layer, ignored).resolve_all();
  Config cfg;
  cfg.ignored_keys = ignored.notes;
  for (const auto& spec : option_schema()) {
    auto it = layer.find(spec.name);
    if (it != layer.end()) spec.assign(cfg, it->second);
  }
  return cfg;
}

}  // namespace

Config load_config_text(const std::string& yaml_text, const std::string& source_name,
                        const std::vector<Override>& overrides) {
  IgnoredKeys ignored;
  Layer layer = read_yaml(yaml_text, source_name, ignored);
  return build(std::move(layer), std::move(ignored), overrides);
}

Config load_config(const std::string& yaml_path, const std::vector<Override>& overrides) {
  if (yaml_path.empty()) return build({}, {}, overrides);
  std::ifstream file(yaml_path);
  if (!std::filesystem::is_regular_file(yaml_path) || !file)
    throw ConfigError(cat("--config: cannot read config file '", yaml_path, "'",
                          std::filesystem::exists(yaml_path) ? "" : " (no such file)"));
  std::stringstream text;
  text << file.rdbuf();
  return load_config_text(text.str(), yaml_path, overrides);
}

std::vector<std::string> unlisted_keys(const std::string& yaml_path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(yaml_path);
  } catch (const YAML::Exception& e) {
    throw ConfigError(cat(mark_of(yaml_path, e.mark), ": ", e.msg));
  }
  std::vector<std::string> out;
  if (root.IsMap()) collect_unlisted(root, "", "", out);
  return out;
}

}  // namespace areal
