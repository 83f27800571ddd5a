// Verifiable rewards: 1 for a correct answer, 0 otherwise.
//   exact_match  the answer equals the reference after trimming whitespace
//   math         the final answer of a math solution (the last \boxed{...}, else what
//                follows "####" as in GSM8K, else the last number) equals the
//                reference numerically: "0.5" = "1/2" = "\frac{1}{2}", "1,000" = "1000",
//                units, "x =" and LaTeX spacing aside: "x = 70 \text{ cm}" = "70", "1{,}000"
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "areal/data/builtin_tasks.h"

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

// The contents of the last \boxed{...} of `text` (nested braces balanced), if any.
std::optional<std::string> last_boxed(const std::string& text);

// The final answer of a solution text, or nothing when it has none.
std::optional<std::string> extract_math_answer(const std::string& text);

// The value of a number as written in answers: "1,000", "-2.5", "$3", "3/4",
// "\frac{3}{4}", "\dfrac{3}{4}"; nothing for anything else.
std::optional<double> parse_math_number(const std::string& text);

bool math_answers_equal(const std::string& a, const std::string& b);

}  // namespace areal
