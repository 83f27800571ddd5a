// A step's answers on this rank, laid out for the engine: the rollout stage's output
// and what every later stage of the RL step reads (rl_trainer.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "areal/data/prompt_dataset.h"
#include "areal/fsdp/micro_batches.h"
#include "areal/reward/reward.h"
#include "areal/rl/async_queue.h"
#include "areal/rollout/generation.h"
#include "areal/text/tokenizer.h"

namespace areal {

// What a step's episodes add to its statistics (zero without episodes).
struct EpisodeCounts {
  int64_t episodes = 0, turns = 0, tool_messages = 0, env_failures = 0, limit_ends = 0, env_tokens = 0;
  double env_seconds = 0;
};

// Targets are ids[:, 1:]; position t of the [rows, L - 1] tensors predicts token t + 1.
struct Rollout {
  at::Tensor ids;        // [rows, L] prompt + answer, right-padded
  at::Tensor loss_mask;  // [rows, L - 1] 1 where the target is an answer token
  at::Tensor old_logp;   // [rows, L - 1] behaviour log-probs of the answer tokens
  std::vector<int64_t> lengths;  // real tokens per row (prompt + answer)
  std::vector<int64_t> prompt_lengths;  // the prompt's tokens per row
  // A mixture of experts: [rows, L, sparse layers x k] int16, the experts the rollout
  // sent each token to (Generated::experts), -1 where none ran; undefined otherwise.
  at::Tensor experts;
  std::vector<int64_t> answer_lengths;
  std::vector<float> truncated_rows;  // 1 where the answer hit max_new_tokens without a stop token
  std::vector<double> rewards;   // raw rewards
  std::vector<int64_t> head_versions;  // asynchronous RL: the weight version of each answer's first token
  int64_t answer_tokens = 0, longest_answer = 0, truncated = 0, reward_failures = 0;
  EpisodeCounts episodes;

  int64_t rows() const { return static_cast<int64_t>(lengths.size()); }
  // For micro-batches; `share_prompts`: a group's rows may share their prompt (MicroBatch).
  PaddedSequences sequences(bool share_prompts) const {
    return {ids, lengths, experts, share_prompts ? prompt_lengths : std::vector<int64_t>{}};
  }
};

// The raw reward of each answer (n_samples per prompt) of prompts [first_prompt, end):
// reward_fn's, or an episode's from its environment.
std::vector<double> score_answers(const std::vector<SharedPrompt>& prompts, int64_t n_samples,
                                  const std::vector<Generated>& answers, size_t first_prompt, const Tokenizer& tokenizer,
                                  Rewarder& reward, int64_t& failures);

// Lays out the answers (n_samples per prompt); the caller fills in the rewards.
Rollout pack(const std::vector<SharedPrompt>& prompts, int64_t n_samples, const std::vector<Generated>& answers,
             const Tokenizer& tokenizer);

// Asynchronous RL: this rank's groups of a step, scored on the generation side.
Rollout pack_groups(const std::vector<FinishedGroup>& groups, const PromptDataset& train, int64_t n_samples,
                    const Tokenizer& tokenizer);

}  // namespace areal
