// --job preview: the first prompts of train_dataset.path exactly as the rollout feeds
// them to the model (the chat template applied, then tokenized), with their token
// counts, so a user sees what the model sees before spending GPU hours. Reads the
// tokenizer, the template and the dataset only: no collective, no model weights.
#pragma once

#include <ostream>

#include "areal/config/config.h"

namespace areal {

// Writes the preview to `out`. Throws ConfigError naming the option whose file or
// template fails.
void run_preview(const Config& cfg, std::ostream& out);

}  // namespace areal
