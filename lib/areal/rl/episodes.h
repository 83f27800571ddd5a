// Multi-turn episodes (docs/agentic.md): the model answers, the environment
// (reward/environment.h) replies or ends the episode with a reward, for at most
// agent_run_args.max_turns model turns. This file holds the bookkeeping between the
// generation engine (rollout/generation.h: EpisodeHooks, which keeps each episode's KV
// cache between turns and decodes other rows while one waits) and the environment:
// the conversation so far, the environment's message as templated tokens (loss mask 0),
// the reward with turn_discount, and how each episode ended.
//
// In a tensor-parallel group only the first rank talks to the environment; it
// broadcasts each decision to the others, so every rank of the group appends the same
// tokens at the same step.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "areal/data/prompt_dataset.h"
#include "areal/dist/communicator.h"
#include "areal/reward/environment.h"
#include "areal/rollout/generation.h"
#include "areal/text/chat_template.h"

namespace areal {

struct EpisodeSettings {
  int64_t max_turns = 1;
  double turn_discount = 1.0;
  int64_t context = 0;  // an episode's tokens with its prompt, at most (SamplingParams::max_tokens)
};

class EpisodeRunner {
 public:
  // `env`: the environment on the group's first rank, nullptr on the others; `group`:
  // the tensor-parallel group (nullptr at t = 1). `stop_ids`: the tokens that close a
  // turn (an unclosed one gets EOS before the environment's message, as AReaL adds it).
  EpisodeRunner(Environment* env, Communicator* group, const Tokenizer& tokenizer, const PromptTemplate& tmpl,
                std::vector<int64_t> stop_ids, EpisodeSettings settings);

  // The hooks of one generation stream; `prompt_of(id)` is episode id's prompt.
  EpisodeHooks hooks(std::function<const Prompt*(int64_t id)> prompt_of);
  // Fills in the episode's reward, turns and ending and forgets it: call it where the
  // stream's `finished` takes the episode.
  void complete(int64_t id, Generated& episode);

 private:
  struct State {
    std::vector<std::string> messages;  // after the prompt, as JSON objects (the first rank's only)
    int64_t turn_start = 0;             // where the model's current turn starts in the tokens
    int64_t length = 0;                 // prompt + tokens when the turn ended
    bool final = false, closed = false;
    int64_t turns = 0, tool_messages = 0;
    double env_seconds = 0, reward = 0;
    EpisodeEnd end = EpisodeEnd::kDone;
  };
  struct Decision {
    int64_t id = 0;
    bool end = false;
    double reward = 0, seconds = 0;
    EpisodeEnd how = EpisodeEnd::kDone;
    std::string role, content;     // to continue
    std::vector<int64_t> tokens;
  };
  void turn_ended(int64_t id, const Generated& episode);
  std::vector<TurnReply> replies(bool wait);
  Decision decide(const EnvReply& reply);
  void share(std::vector<Decision>& decisions);  // the group's first rank's, to every rank

  Environment* env_;
  Communicator* group_;
  const Tokenizer& tokenizer_;
  const PromptTemplate& tmpl_;
  std::vector<int64_t> stop_ids_;
  EpisodeSettings settings_;
  std::function<const Prompt*(int64_t)> prompt_of_;
  std::map<int64_t, State> states_;
};

}  // namespace areal
