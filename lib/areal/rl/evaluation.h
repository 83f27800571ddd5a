// Held-out evaluation: answers to the valid_dataset prompts, scored by the reward
// function (or an episode's environment). greedy_eval: one greedy answer per prompt, the
// accuracy the RL job logs; sample_eval: k sampled answers per prompt, what --job eval
// reports as pass@k and maj@k (rl/eval_job.h) and the RL job logs with
// evaluator.n_samples (sampled_figures).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "areal/data/prompt_dataset.h"
#include "areal/dist/communicator.h"
#include "areal/reward/reward.h"
#include "areal/rl/episodes.h"
#include "areal/rl/eval_metrics.h"
#include "areal/rollout/generation.h"
#include "areal/stats/stats_logger.h"
#include "areal/text/tokenizer.h"

namespace areal {

struct EvalCounts {
  double correct = 0, scored = 0;
  double tool_calls = 0;  // episodes: tool messages over the scored episodes
};

// Rank `member` takes items member, member + world_size, ... of `n`; a generation group
// generates its members' items together, in member order.
std::vector<size_t> items_of(int member, int world_size, size_t n);

// A generation group's share of `n` items (its members' in member order, `group_size`
// ranks from `group_first`) into `items`, and into `mine` whether rank `rank` scores each.
void group_items(int group_first, int group_size, int rank, int world_size, size_t n, std::vector<size_t>& items,
                 std::vector<bool>& mine);

// One scored answer.
struct ScoredAnswer {
  std::string text;  // decoded (an episode's: every turn, the environment's messages too)
  double reward = 0;
  int64_t tokens = 0;
  bool truncated = false;
  int64_t tool_calls = 0;  // episodes: its tool messages
};

// `n_samples` answers to each of the prompts `items` of `data` on `model` (collective
// over its tensor-parallel group, whose ranks pass the same items), `chunk` prompts at
// a time. Answer s of item i samples with answer_generator(seed, -1, i, s), so it is the
// same at every world size and tensor-parallel degree (greedy: no generator). Returns,
// for each item with mine[k], its answers scored here (others' are scored by their
// ranks). With `episodes`, each answer is an episode scored by its environment.
// `progress(prompts done)` after each chunk.
std::vector<std::vector<ScoredAnswer>> sample_eval(RolloutModel& model, const PromptDataset& data,
                                                   const std::vector<size_t>& items, const std::vector<bool>& mine,
                                                   const SamplingParams& sampling, int64_t n_samples, int64_t seed,
                                                   const Tokenizer& tokenizer, Rewarder& reward, int64_t chunk,
                                                   EpisodeRunner* episodes = nullptr,
                                                   const std::function<void(size_t)>& progress = {});

// One greedy answer per prompt (sample_eval with greedy sampling), counted: an answer
// with a reward > 0 is correct.
EvalCounts greedy_eval(RolloutModel& model, const PromptDataset& data, const std::vector<size_t>& items,
                       const std::vector<bool>& mine, SamplingParams sampling, const Tokenizer& tokenizer,
                       Rewarder& reward, int64_t chunk, EpisodeRunner* episodes = nullptr);

// One prompt's sampled answers judged: each answer's key (answer_key for `reward_fn`),
// how many are right (reward > 0) and their majority vote.
struct PromptVerdict {
  std::vector<std::string> keys;
  int64_t correct = 0;
  Vote vote;
};
PromptVerdict judge_answers(const std::string& reward_fn, const std::vector<ScoredAnswer>& answers);

// The figures of `n` sampled answers per prompt over every rank's prompts (each rank
// passes those it scored; collective over `comm`): "eval_pass@k" for k in
// reported_ks(n), then "eval_maj@n", each the mean over the prompts.
Stats sampled_figures(const std::string& reward_fn, int64_t n, const std::vector<std::vector<ScoredAnswer>>& answers,
                      Communicator& comm);

}  // namespace areal
