#include "areal/job/preview.h"

#include "areal/data/prompt_dataset.h"
#include "areal/fsdp/staged_init.h"
#include "areal/job/job_inputs.h"
#include "areal/util/error.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

std::string ids_text(const std::vector<int64_t>& ids) {
  std::vector<std::string> items;
  for (int64_t id : ids) items.push_back(std::to_string(id));
  return "[" + join(items, ", ") + "]";
}

std::string template_summary(const PromptTemplate& tmpl) {
  if (tmpl.name == "model") return cat("the model's own (", tmpl.model->source(), ")");
  return tmpl.name;
}

}  // namespace

void run_preview(const Config& cfg, std::ostream& out) {
  const ModelConfig model = init_model_config(cfg);
  const std::unique_ptr<Tokenizer> tokenizer = model_tokenizer(cfg, model);
  const PromptTemplate tmpl = chat_template_for(cfg, *tokenizer);
  const DatasetConfig& td = cfg.train_dataset;
  std::unique_ptr<PromptDataset> data;
  try {
    data = std::make_unique<PromptDataset>(td.path, td.prompt_key, td.answer_key, td.max_length, *tokenizer, tmpl,
                                           split_of(td, "train"));
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    throw ConfigError(cat("option 'train_dataset.path': ", e.what()));
  }
  std::vector<int64_t> stops = {tokenizer->eos_id()};
  stops.insert(stops.end(), tmpl.stop_ids.begin(), tmpl.stop_ids.end());
  stops.insert(stops.end(), cfg.gconfig.stop_token_ids.begin(), cfg.gconfig.stop_token_ids.end());
  out << "chat_template: " << template_summary(tmpl) << ", enable_thinking: " << (tmpl.enable_thinking ? "true" : "false")
      << "\nanswers stop at token ids " << ids_text(stops) << "\n"
      << td.path << ": " << data->size() << " prompts (" << data->skipped()
      << " longer than train_dataset.max_length skipped), the longest " << longest_prompt(*data) << " tokens\n";
  const size_t shown = std::min<size_t>(data->size(), static_cast<size_t>(cfg.preview_prompts));
  for (size_t i = 0; i < shown; ++i) {
    const Prompt& p = (*data)[i];
    out << "\n=== prompt " << i + 1 << " of " << data->size() << ": " << p.ids.size() << " tokens ===\n"
        << tokenizer->decode(p.ids, /*skip_special=*/false) << "\n--- token ids ---\n" << ids_text(p.ids) << "\n";
  }
}

}  // namespace areal
