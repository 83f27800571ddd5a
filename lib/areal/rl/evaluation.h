// Held-out evaluation: greedy answers to the valid_dataset prompts, scored by the
// reward function; the accuracy is the share of answers with a reward > 0.
#pragma once

#include <vector>

#include "areal/data/prompt_dataset.h"
#include "areal/reward/reward.h"
#include "areal/rl/episodes.h"
#include "areal/rollout/generation.h"
#include "areal/text/tokenizer.h"

namespace areal {

struct EvalCounts {
  double correct = 0, scored = 0;
  double tool_calls = 0;  // episodes: tool messages over the scored episodes
};

// Greedy answers to the prompts `items` of `data` on `model` (collective over its
// tensor-parallel group, whose ranks pass the same items), `chunk` prompts at a time;
// the answers with mine[k] are scored here. With `episodes`, each prompt is a greedy
// episode, scored by its environment.
EvalCounts greedy_eval(RolloutModel& model, const PromptDataset& data, const std::vector<size_t>& items,
                       const std::vector<bool>& mine, SamplingParams sampling, const Tokenizer& tokenizer,
                       Rewarder& reward, int64_t chunk, EpisodeRunner* episodes = nullptr);

}  // namespace areal
