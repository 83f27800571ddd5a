// A Jinja chat template, parsed once and rendered as transformers' apply_chat_template
// renders it (Jinja2 with trim_blocks, lstrip_blocks, loop controls and transformers'
// globals). The supported subset is listed in docs/models.md; anything outside it is a
// JinjaError naming the template's line, never a silent difference.
#pragma once

#include <string>
#include <vector>

#include "areal/text/jinja_parser.h"
#include "areal/text/jinja_value.h"

namespace areal::jinja {

class Template {
 public:
  // `name` appears in error messages ("tokenizer_config.json chat_template line 3: ...").
  Template(const std::string& source, const std::string& name);

  // The text for the variables in `context` (messages, add_generation_prompt, bos_token, ...).
  std::string render(const ValueDict& context) const;

 private:
  std::string name_;
  std::vector<Node> nodes_;
};

}  // namespace areal::jinja
