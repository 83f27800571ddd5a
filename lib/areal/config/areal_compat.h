// AReaL's config files as areal-train reads them: AReaL's spellings of options that
// areal-train declares under another name (aliases), and the keys of things areal-train
// does differently (inference servers, launchers, name resolution, trackers), which
// are accepted and ignored with one warning. Everything else unknown stays an error.
// The table is in docs/configuration.md ("AReaL's keys").
#pragma once

#include <string>
#include <vector>

namespace areal {

// The option an AReaL spelling stands for ("actor.path" -> "model_path",
// "actor.optimizer.lr" -> "optimizer.lr"), or `name` itself.
std::string canonical_option_name(const std::string& name);

// Why areal-train ignores the AReaL key `name` (a dotted leaf), or "" when it is not
// one it ignores.
std::string ignored_areal_key_reason(const std::string& name);

// True for the options AReaL declares Optional (`freq_steps: null`, `c_clip: null`):
// there `null` means unset, which is the option's default here. Elsewhere `null` is an
// error, as AReaL's typed configs make it.
bool null_means_default(const std::string& option);

// The notes of Config::ignored_keys ("key: why") as one line, the keys of one reason
// together: "a, b (why); c (why)".
std::string ignored_keys_summary(const std::vector<std::string>& notes);

// AReaL's keys of algorithms areal-train does not have (a critic, SAPO, M2PO), with
// why: a config that turns one on is refused naming the key and the reason, never run
// as something else. Off values (null, false) are accepted and ignored, and so are the
// values that ask for what areal-train does anyway (`same`).
struct RefusedKey {
  std::string pattern;  // a section when it ends with '.'
  std::string reason;
  std::vector<std::string> same = {};  // values that mean what areal-train does
};
const std::vector<RefusedKey>& refused_areal_keys();
// Why AReaL's key `name` (a dotted leaf or a section) is refused, or "".
std::string refused_areal_key_reason(const std::string& name);
// True when `name` is one of AReaL's keys listed as ignored or refused.
bool listed_areal_key(const std::string& name);

// True when `value` of the refused key `name` asks for what areal-train does anyway.
bool refused_areal_key_accepts(const std::string& name, const std::string& value);

// Every alias, as "areal spelling" -> "option" (for the docs and their test).
struct OptionAlias {
  std::string areal_name;  // a prefix when it ends with '.'
  std::string option;
};
const std::vector<OptionAlias>& option_aliases();

// Every ignored key or prefix (ending with '.'; "*." matches any one section) with why.
struct IgnoredKey {
  std::string pattern;
  std::string reason;
};
const std::vector<IgnoredKey>& ignored_areal_keys();

}  // namespace areal
