// Verifiable rewards: 1 for a correct answer, 0 otherwise.
//   exact_match  the answer equals the reference after trimming whitespace
//   math         the final answer of a math solution (the last \boxed{...}, else what
//                follows "####" as in GSM8K, else the last number) is the reference's as
//                math-verify judges it (math_grader.h)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "areal/data/builtin_tasks.h"
#include "areal/reward/math_grader.h"

namespace areal {

class WorkerPool;

using RewardFn = std::function<double(const std::string& answer, const std::string& reference)>;

// The reward function named `name`; throws ConfigError naming the choices otherwise.
RewardFn reward_function(const std::string& name);

// One answer to score, with what AReaL's reward functions are given.
struct RewardCall {
  const PromptExample* example = nullptr;  // the prompt's text, its reference, its dataset row
  std::string answer;                      // the answer's text
  std::vector<int64_t> prompt_ids, answer_ids;
};

// The line a reward command reads for `call`: AReaL's reward_fn arguments as one JSON
// object, {"prompt", "completions" (the answer's text), "prompt_ids",
// "completion_ids"} and every field of the dataset's row ("answer" for a built-in task),
// so that an AReaL reward function is called as fn(**json.loads(line)).
std::string reward_request_json(const RewardCall& call);

// Scores answers with reward_fn: a built-in name, or `command:<shell command>` run as
// a pool of `workers` processes (worker_pool.h), each call within `timeout_seconds`.
class Rewarder {
 public:
  Rewarder(const std::string& reward_fn, int64_t workers, double timeout_seconds);
  ~Rewarder();
  // One reward per call; a failed one (a throw, a timeout, a crash, a reply that is
  // not a number) is 0 and counted in `failures`.
  std::vector<double> score(const std::vector<RewardCall>& calls, int64_t& failures);

 private:
  RewardFn builtin_;
  std::unique_ptr<WorkerPool> workers_;
};

// reward(answer, reference), or 0 when the function throws; `failures` counts those,
// and the first one is logged as a warning.
double reward_or_zero(const RewardFn& reward, const std::string& answer, const std::string& reference,
                      int64_t& failures);

}  // namespace areal
