#include "areal/rl/evaluation.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "areal/util/strings.h"

namespace areal {

std::vector<size_t> items_of(int member, int world_size, size_t n) {
  std::vector<size_t> items;
  for (size_t i = static_cast<size_t>(member); i < n; i += static_cast<size_t>(world_size)) items.push_back(i);
  return items;
}

void group_items(int group_first, int group_size, int rank, int world_size, size_t n, std::vector<size_t>& items,
                 std::vector<bool>& mine) {
  for (int member = group_first; member < group_first + group_size; ++member)
    for (size_t i : items_of(member, world_size, n)) {
      items.push_back(i);
      mine.push_back(member == rank);
    }
}

std::vector<std::vector<ScoredAnswer>> sample_eval(RolloutModel& model, const PromptDataset& data,
                                                   const std::vector<size_t>& items, const std::vector<bool>& mine,
                                                   const SamplingParams& params, int64_t n_samples, int64_t seed,
                                                   const Tokenizer& tokenizer, Rewarder& reward, int64_t chunk,
                                                   EpisodeRunner* episodes,
                                                   const std::function<void(size_t)>& progress) {
  constexpr int64_t kEvalStep = -1;  // the generators' step: apart from every training step's
  SamplingParams sampling = params;
  sampling.record_experts = false;  // nothing trains on these answers
  std::vector<std::vector<ScoredAnswer>> out;
  int64_t failures = 0;
  const size_t n = static_cast<size_t>(n_samples);
  for (size_t begin = 0; begin < items.size(); begin += static_cast<size_t>(chunk)) {
    const size_t end = std::min(items.size(), begin + static_cast<size_t>(chunk));
    std::vector<SharedPrompt> held;  // one per row, held while the chunk's episodes run
    std::vector<std::vector<int64_t>> rows;
    std::vector<at::Generator> generators;
    for (size_t k = begin; k < end; ++k) {
      const SharedPrompt prompt = data.shared(items[k]);
      for (size_t s = 0; s < n; ++s) {
        held.push_back(prompt);
        rows.push_back(prompt->ids);
        if (!sampling.greedy)
          generators.push_back(
              answer_generator(seed, kEvalStep, static_cast<int64_t>(items[k]), static_cast<int64_t>(s)));
      }
    }
    std::vector<Generated> answers;
    if (episodes) {  // an episode scores its environment's reward
      const EpisodeHooks hooks = episodes->hooks([&](int64_t id) { return held[static_cast<size_t>(id)].get(); });
      answers = generate(model, rows, sampling, generators, nullptr, {}, hooks);
      for (size_t r = 0; r < answers.size(); ++r) episodes->complete(static_cast<int64_t>(r), answers[r]);
    } else {
      answers = generate(model, rows, sampling, generators);
    }
    std::vector<RewardCall> calls;
    const size_t chunk_first = out.size();
    for (size_t k = begin; k < end; ++k) {
      if (!mine[k]) continue;
      std::vector<ScoredAnswer>& scored = out.emplace_back();
      for (size_t s = 0; s < n; ++s) {
        const size_t r = (k - begin) * n + s;
        const Generated& g = answers[r];
        scored.push_back({tokenizer.decode(g.tokens), g.reward, static_cast<int64_t>(g.tokens.size()), g.truncated,
                          g.tool_messages});
        if (!episodes) calls.push_back({&held[r]->example, scored.back().text, held[r]->ids, g.tokens});
      }
    }
    if (!episodes) {
      const std::vector<double> rewards = reward.score(calls, failures);
      size_t next = 0;
      for (size_t j = chunk_first; j < out.size(); ++j)
        for (ScoredAnswer& a : out[j]) a.reward = rewards[next++];
    }
    if (progress) progress(end);
  }
  return out;
}

EvalCounts greedy_eval(RolloutModel& model, const PromptDataset& data, const std::vector<size_t>& items,
                       const std::vector<bool>& mine, SamplingParams sampling, const Tokenizer& tokenizer,
                       Rewarder& reward, int64_t chunk, EpisodeRunner* episodes) {
  sampling.greedy = true;
  EvalCounts counts;
  for (const auto& answers : sample_eval(model, data, items, mine, sampling, 1, 0, tokenizer, reward, chunk, episodes))
    for (const ScoredAnswer& a : answers) {
      counts.correct += a.reward > 0;
      counts.scored += 1;
      counts.tool_calls += static_cast<double>(a.tool_calls);
    }
  return counts;
}

PromptVerdict judge_answers(const std::string& reward_fn, const std::vector<ScoredAnswer>& answers) {
  PromptVerdict verdict;
  std::vector<double> rewards;
  for (const ScoredAnswer& a : answers) {
    verdict.keys.push_back(answer_key(reward_fn, a.text));
    rewards.push_back(a.reward);
    verdict.correct += a.reward > 0;
  }
  verdict.vote = majority_vote(reward_fn, verdict.keys, rewards);
  return verdict;
}

Stats sampled_figures(const std::string& reward_fn, int64_t n, const std::vector<std::vector<ScoredAnswer>>& answers,
                      Communicator& comm) {
  const std::vector<int64_t> ks = reported_ks(n);
  at::Tensor sums = at::zeros({static_cast<int64_t>(ks.size()) + 2}, at::kDouble);  // pass@k..., maj, prompts
  double* sum = sums.data_ptr<double>();
  for (const std::vector<ScoredAnswer>& prompt : answers) {
    const PromptVerdict verdict = judge_answers(reward_fn, prompt);
    for (size_t j = 0; j < ks.size(); ++j) sum[j] += pass_at_k(n, verdict.correct, ks[j]);
    sum[ks.size()] += verdict.vote.correct;
    sum[ks.size() + 1] += 1;
  }
  comm.all_reduce(sums, ReduceOp::Sum);
  const double prompts = std::max(1.0, sum[ks.size() + 1]);
  Stats figures;
  for (size_t j = 0; j < ks.size(); ++j) figures.push_back({cat("eval_pass@", ks[j]), sum[j] / prompts});
  figures.push_back({cat("eval_maj@", n), sum[ks.size()] / prompts});
  return figures;
}

}  // namespace areal
