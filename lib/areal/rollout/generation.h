// Rollout: answers sampled from the current policy with the KV cache.
//
// For the rollout phase each rank takes its tensor-parallel slice of the policy from
// the shards (RolloutModel, rollout_model.h: unit by unit, LoRA merged in) and its
// generation group of t ranks generates the group's prompts together. Per rank:
//   parameters / t x dtype size  +  one unit (the one being sliced)
//   +  on the CPU with a tied head, its packed copy (vocab / t x hidden x dtype size)
//   +  KV cache (rows x (prompt + max_new_tokens) x layers x 2 x kv_heads / t x head_dim
//      x dtype size)  +  the logits of one step (rows x vocab / t x (4 + dtype size)),
// with rows = the answers the group generates together; check_rollout_memory refuses to
// start when that is more than the device has free.
#pragma once

#include <ATen/core/Generator.h>

#include <functional>
#include <memory>
#include <vector>

#include "areal/config/config.h"
#include "areal/dist/communicator.h"
#include "areal/model/transformer.h"
#include "areal/rollout/rollout_model.h"
#include "areal/rollout/sampling.h"

namespace areal {

// How an episode ended (rl/episodes.h).
enum class EpisodeEnd : uint8_t { kDone, kEnvFailure, kTurnLimit, kContextLimit };

struct Generated {
  std::vector<int64_t> tokens;  // the answer, ending with its stop token (or the token that
                                // completed a stop string) unless truncated; an episode's:
                                // every turn after the prompt, the environment's messages too
  std::vector<float> logprobs;  // log p(token) under softmax(logits / temperature), per token
                                // (0 for the environment's)
  bool truncated = false;       // max_new_tokens (or gconfig.max_tokens) reached without a stop
  std::vector<int64_t> versions;  // the weight version each token was sampled with (with a
                                  // WeightCheck; -1 for the environment's)
  // SamplingParams::record_experts: the experts each token that ran through the model went
  // to, in sequence order (the prompt's tokens, then the answer's but its last, which
  // never ran), sparse layers x num_experts_per_tok ids per token, the router's order.
  std::vector<int16_t> experts;
  // Episodes only (empty / 0 for a single answer, which reward_fn scores):
  std::vector<uint8_t> model_tokens;  // per token: 1 the model's, 0 the environment's (loss mask)
  int64_t turns = 0;                  // the model's turns
  int64_t tool_messages = 0;          // environment messages with role "tool"
  double reward = 0;                  // from the environment, turn_discount applied
  double env_seconds = 0;             // waiting for the environment
  EpisodeEnd end = EpisodeEnd::kDone;
};

// Episodes (rl/episodes.h): with `turn_ended` set, an answer whose turn ends (stop token,
// stop string, max_new_tokens) is handed to it, the episode so far, and its row waits
// with its KV cache kept while the other rows go on. `replies` hands back the episodes
// whose environment answered: to continue (the tokens to append, prefilled onto the
// kept cache, then the model's next turn; max/min_new_tokens count per turn) or to end
// (then `finished` gets the episode). It is called before each forward step with `wait`
// false, and with `wait` true when no row could run without a reply (it must then
// return at least one). The group's ranks must get the same replies at the same calls.
// Episodes need SamplingParams::max_tokens: a row's room in the cache.
struct TurnReply {
  int64_t id = 0;
  bool end = false;
  std::vector<int64_t> tokens;  // to continue: the environment's message, templated
};
struct EpisodeHooks {
  std::function<void(int64_t id, const Generated& episode)> turn_ended;
  std::function<std::vector<TurnReply>(bool wait)> replies;
  explicit operator bool() const { return static_cast<bool>(turn_ended); }
};

// Interruptible generation (asynchronous RL): called before each forward step of the
// batch; it may replace the model's weights in place with newer ones and returns the
// version of the weights the step runs on, kept per token in Generated::versions.
using WeightCheck = std::function<int64_t()>;

// The parameters of the model's largest unit (a decoder layer, or embedding + norm).
int64_t largest_unit_parameters(const ModelConfig& config);
// Bytes the rollout needs per rank (formula above; `packed_weights`: packs_weights() holds,
// so a tied head is packed as a copy beside the embedding) and the bytes free on `device`
// (host: MemAvailable; CUDA: the driver's free memory).
int64_t rollout_memory_bytes(const ModelConfig& config, int64_t parameters, at::ScalarType dtype, int64_t rows, int64_t max_prompt,
                             int64_t max_new_tokens, int64_t tensor_parallel, bool packed_weights);
int64_t free_memory_bytes(const at::Device& device);
// Throws std::runtime_error with both figures when the rollout would not fit.
void check_rollout_memory(const ModelConfig& config, int64_t parameters, at::ScalarType dtype, int64_t rows, int64_t max_prompt,
                          int64_t max_new_tokens, int64_t tensor_parallel, const at::Device& device);

// One answer per prompt (repeat a prompt for several samples), in one batch of at most
// params.max_rows rows: one prefill of the right-padded prompts, then token by token
// with a paged KV cache (paged_kv_cache.h); a finished answer leaves the batch at once
// and a waiting prompt takes its row (docs/rl.md). Row r samples with generators[r]
// (sampling.h), so an answer depends on its row's seed, not on the device, the batch
// it shares or the ranks that generate it. Collective over the model's tensor-parallel
// group: its ranks pass the same prompts and get the same answers.
// `cache_bytes`, when given, receives the most bytes of KV cache this rank held at once.
// `weight_check`, when given, runs before every forward step (above); the keys and
// values cached before new weights came stay as they were computed.
// With `episodes` set, each prompt starts an episode (below) and its answer is the episode.
std::vector<Generated> generate(RolloutModel& model, const std::vector<std::vector<int64_t>>& prompts,
                                const SamplingParams& params, std::vector<at::Generator>& generators,
                                int64_t* cache_bytes = nullptr, const WeightCheck& weight_check = {},
                                const EpisodeHooks& episodes = {});
// Continuous generation from a stream of prompts (asynchronous RL): `next` hands out
// the next answer to start (its prompt and, when sampling, its generator; false: none
// now) and `finished` takes each answer the moment it ends, with its id (the order
// answers started in). A finished answer's row goes to the next answer from the source
// at once, so the batch stays full while the source has prompts; returns once every
// started answer finished and the source has none to give. At most `max_rows` answers
// run at once; no prompt may be longer than `longest_prompt`. Returns the most bytes of
// KV cache this rank held. Collective over the model's group like generate (its ranks'
// sources must hand out the same prompts).
struct PromptSource {
  std::function<bool(std::vector<int64_t>& prompt, at::Generator& generator)> next;
  std::function<void(int64_t id, Generated answer)> finished;
  EpisodeHooks episodes;  // unset: single answers
};
int64_t generate_stream(RolloutModel& model, const SamplingParams& params, int64_t longest_prompt, int64_t max_rows,
                        PromptSource& source, const WeightCheck& weight_check = {});

// The same on a whole model (t = 1).
std::vector<Generated> generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                const SamplingParams& params, std::vector<at::Generator>& generators);

// A CPU generator for one answer: seeded from (seed, step, prompt, sample).
at::Generator answer_generator(int64_t seed, int64_t step, int64_t prompt, int64_t sample);

}  // namespace areal
