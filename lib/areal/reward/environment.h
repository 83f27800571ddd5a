// The environment of multi-turn episodes (option `env`, docs/agentic.md): after each of
// the model's turns it gets the episode so far and either replies with a message (the
// episode goes on) or ends it with a reward.
//   builtin:multi_turn_math  reward_fn scores the turn; while it scores 0 the model is
//                            asked to try again (AReaL's multi-turn math workflow)
//   builtin:calculator       a turn that ends in <calc>expression</calc> gets the value
//                            as a tool message; a turn without one is the answer, scored
//                            by reward_fn
//   command:<shell command>  the user's program, a pool of workers (worker_pool.h): one
//                            JSON line in per turn, one JSON line out
// Environments answer asynchronously: turns are submitted, replies polled, so the
// generation of other episodes goes on meanwhile.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "areal/data/builtin_tasks.h"

namespace areal {

class Rewarder;

// What an environment gets after a model turn.
struct EnvTurn {
  int64_t episode = 0;           // returned with the reply
  const PromptExample* example = nullptr;  // the dataset row
  std::string messages_json;     // the episode so far as chat messages (the last is the turn)
  std::string last;              // the model's last turn, text
  int64_t turn = 0;              // 0 for the first model turn
  bool final = false;            // no further turn can follow (max_turns or the context)
};

struct EnvReply {
  int64_t episode = 0;
  bool done = false;       // the episode ends with `reward`
  double reward = 0;
  std::string role;        // else: the next message, "user" or "tool"
  std::string message;
  bool failed = false;     // timeout, crash or garbage: the episode ends with reward 0
  double seconds = 0;      // from submit to reply
};

class Environment {
 public:
  virtual ~Environment() = default;
  virtual void submit(EnvTurn turn) = 0;
  // The replies that came in; waits up to `wait_seconds` for the first while turns are out.
  virtual std::vector<EnvReply> poll(double wait_seconds) = 0;
};

// The environment `env` names ("" is builtin:multi_turn_math); `reward` scores the
// built-ins' answers and must outlive it. A command's workers are started here; a
// program that exits at once is a ConfigError.
std::unique_ptr<Environment> make_environment(const std::string& env, Rewarder& reward, int64_t workers,
                                              double timeout_seconds);

// The JSON line a command environment reads for `turn`: {"messages", "last", "turn",
// "final", "row": the dataset row's fields ({"answer"} for a built-in task)}.
std::string env_request_json(const EnvTurn& turn);
// A command environment's reply line: {"message": "...", "role": "user"|"tool"} (role
// defaults to user) or {"done": true, "reward": r}; nothing for anything else.
std::optional<EnvReply> parse_env_reply(const std::string& line);

// The calculator's arithmetic: + - * / %, parentheses, unary minus, decimal numbers;
// nothing for anything else (no names, no calls: model text is never run).
std::optional<double> evaluate_arithmetic(const std::string& expression);
// The expression of a turn that ends in <calc>...</calc> (trailing whitespace aside).
std::optional<std::string> calculator_call(const std::string& turn);
// A number as the calculator writes it: integers without a decimal point.
std::string calculator_value(double value);

}  // namespace areal
