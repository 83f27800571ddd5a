#include "areal/rl/rollout_batch.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>

#include "areal/util/strings.h"

namespace areal {

// The raw reward of each answer (n_samples per prompt) of prompts [first_prompt, end).
std::vector<double> score_answers(const std::vector<SharedPrompt>& prompts, int64_t n_samples,
                                  const std::vector<Generated>& answers, size_t first_prompt, const Tokenizer& tokenizer,
                                  Rewarder& reward, int64_t& failures) {
  std::vector<RewardCall> calls;
  std::vector<double> rewards;
  for (size_t i = first_prompt * n_samples; i < answers.size(); ++i) {
    if (answers[i].turns > 0) {  // an episode: its environment's reward
      rewards.push_back(answers[i].reward);
      continue;
    }
    const Prompt& prompt = *prompts[i / n_samples];
    calls.push_back({&prompt.example, tokenizer.decode(answers[i].tokens), prompt.ids, answers[i].tokens});
  }
  if (!calls.empty()) rewards = reward.score(calls, failures);
  return rewards;
}

namespace {

// Row i's recorded experts into r.experts (made on the first call): the tokens that ran,
// its `ran` first (all but the answer's last, which was sampled and never run).
void put_experts(Rollout& r, int64_t i, const std::vector<int16_t>& experts, int64_t ran, int64_t longest) {
  const int64_t ids = static_cast<int64_t>(experts.size());
  if (!r.experts.defined()) r.experts = at::full({r.rows(), longest, ids / std::max<int64_t>(1, ran)}, -1, at::kShort);
  const int64_t per_token = r.experts.size(2);
  if (ran * per_token != ids)
    throw std::logic_error(cat("pack: answer ", i, " has ", ids, " expert ids for ", ran, " tokens of ", per_token,
                               " ids each"));
  r.experts[i].narrow(0, 0, ran).copy_(at::from_blob(const_cast<int16_t*>(experts.data()), {ran, per_token}, at::kShort));
}

}  // namespace

Rollout pack(const std::vector<SharedPrompt>& prompts, int64_t n_samples, const std::vector<Generated>& answers,
             const Tokenizer& tokenizer) {
  Rollout r;
  const int64_t rows = static_cast<int64_t>(answers.size());
  int64_t longest = 0;
  for (int64_t i = 0; i < rows; ++i) {
    r.lengths.push_back(static_cast<int64_t>(prompts[i / n_samples]->ids.size() + answers[i].tokens.size()));
    r.prompt_lengths.push_back(static_cast<int64_t>(prompts[i / n_samples]->ids.size()));
    longest = std::max(longest, r.lengths.back());
  }
  r.ids = at::full({rows, longest}, tokenizer.pad_id(), at::kLong);
  r.loss_mask = at::zeros({rows, longest - 1}, at::kFloat);
  r.old_logp = at::zeros({rows, longest - 1}, at::kFloat);
  // Every answer has the experts of its tokens, or none does (a dense model).
  const bool experts = rows > 0 && !answers[0].experts.empty();
  for (int64_t i = 0; i < rows; ++i) {
    const Prompt& prompt = *prompts[i / n_samples];
    const Generated& answer = answers[i];
    const int64_t p = static_cast<int64_t>(prompt.ids.size()), a = static_cast<int64_t>(answer.tokens.size());
    r.ids[i].narrow(0, 0, p).copy_(at::tensor(prompt.ids, at::kLong));
    if (a > 0) {
      r.ids[i].narrow(0, p, a).copy_(at::tensor(answer.tokens, at::kLong));
      if (answer.model_tokens.empty()) {
        r.loss_mask[i].narrow(0, p - 1, a).fill_(1);
      } else {  // an episode: the environment's tokens are not trained on
        r.loss_mask[i].narrow(0, p - 1, a).copy_(at::tensor(answer.model_tokens, at::kByte).to(at::kFloat));
      }
      r.old_logp[i].narrow(0, p - 1, a).copy_(at::tensor(answer.logprobs, at::kFloat));
    }
    if (experts) put_experts(r, i, answer.experts, p + std::max<int64_t>(a - 1, 0), longest);
    r.answer_tokens += a;
    r.answer_lengths.push_back(a);
    r.truncated_rows.push_back(answer.truncated ? 1.0f : 0.0f);
    r.longest_answer = std::max(r.longest_answer, a);
    r.truncated += answer.truncated;
    if (!answer.versions.empty()) r.head_versions.push_back(answer.versions.front());
    if (answer.turns > 0) {
      EpisodeCounts& e = r.episodes;
      ++e.episodes;
      e.turns += answer.turns;
      e.tool_messages += answer.tool_messages;
      e.env_seconds += answer.env_seconds;
      e.env_failures += answer.end == EpisodeEnd::kEnvFailure;
      e.limit_ends += answer.end == EpisodeEnd::kTurnLimit || answer.end == EpisodeEnd::kContextLimit;
      for (uint8_t m : answer.model_tokens) e.env_tokens += m == 0;
    }
  }
  return r;
}

Rollout pack_groups(const std::vector<FinishedGroup>& groups, const PromptDataset& train, int64_t n_samples,
                    const Tokenizer& tokenizer) {
  std::vector<SharedPrompt> prompts;
  std::vector<Generated> answers;
  std::vector<double> rewards;
  int64_t failures = 0;
  for (const FinishedGroup& g : groups) {
    if (static_cast<int64_t>(g.answers.size()) != n_samples)
      throw std::runtime_error(cat("group ", g.index, " has ", g.answers.size(), " answers, not gconfig.n_samples = ",
                                   n_samples));
    prompts.push_back(train.shared(static_cast<size_t>(g.prompt)));
    answers.insert(answers.end(), g.answers.begin(), g.answers.end());
    rewards.insert(rewards.end(), g.rewards.begin(), g.rewards.end());
    failures += g.reward_failures;
  }
  Rollout r = pack(prompts, n_samples, answers, tokenizer);
  r.rewards = std::move(rewards);
  r.reward_failures = failures;
  return r;
}

}  // namespace areal
