#include "areal/rl/evaluation.h"

#include <algorithm>

namespace areal {

EvalCounts greedy_eval(RolloutModel& model, const PromptDataset& data, const std::vector<size_t>& items,
                       const std::vector<bool>& mine, SamplingParams sampling, const Tokenizer& tokenizer,
                       Rewarder& reward, int64_t chunk, EpisodeRunner* episodes) {
  sampling.greedy = true;
  sampling.record_experts = false;  // nothing trains on these answers
  EvalCounts counts;
  int64_t failures = 0;
  std::vector<at::Generator> none;
  for (size_t begin = 0; begin < items.size(); begin += static_cast<size_t>(chunk)) {
    const size_t end = std::min(items.size(), begin + static_cast<size_t>(chunk));
    std::vector<SharedPrompt> held;  // the chunk's prompts, held while its episodes run
    std::vector<std::vector<int64_t>> prompts;
    for (size_t k = begin; k < end; ++k) {
      held.push_back(data.shared(items[k]));
      prompts.push_back(held.back()->ids);
    }
    std::vector<Generated> answers;
    if (episodes) {  // an episode scores its environment's reward
      const EpisodeHooks hooks = episodes->hooks([&](int64_t id) { return held[static_cast<size_t>(id)].get(); });
      answers = generate(model, prompts, sampling, none, nullptr, {}, hooks);
      for (size_t k = begin; k < end; ++k) {
        episodes->complete(static_cast<int64_t>(k - begin), answers[k - begin]);
        if (!mine[k]) continue;
        counts.correct += answers[k - begin].reward > 0;
        counts.scored += 1;
        counts.tool_calls += static_cast<double>(answers[k - begin].tool_messages);
      }
      continue;
    }
    answers = generate(model, prompts, sampling, none);
    std::vector<RewardCall> calls;
    for (size_t k = begin; k < end; ++k) {
      if (!mine[k]) continue;
      const Prompt& p = *held[k - begin];
      calls.push_back({&p.example, tokenizer.decode(answers[k - begin].tokens), p.ids, answers[k - begin].tokens});
    }
    for (double r : reward.score(calls, failures)) {
      counts.correct += r > 0;
      counts.scored += 1;
    }
  }
  return counts;
}

}  // namespace areal
