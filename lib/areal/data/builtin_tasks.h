// Generated tasks for demos and tests, named `builtin:<task>/<split>` wherever a
// dataset path goes:
//   builtin:arithmetic/train   "a+b=" -> "a+b" for a, b in 0..99, minus the test split
//   builtin:arithmetic/test    500 of those problems, never in the train split
//   builtin:arithmetic/sloppy_teacher
//                              the train split answered by a teacher who forgets the
//                              carry 60% of the time: warm-up data that leaves a model
//                              preferring wrong answers which RL can then correct
// The problems and the split are fixed (they do not depend on the run's seed), so a
// held-out accuracy means the same thing in every run.
#pragma once

#include <string>
#include <vector>

namespace areal {

struct PromptExample {
  std::string prompt;
  std::string answer;  // the reference the reward function compares against
  std::string row_json;  // a JSONL dataset's whole row (every field), for reward commands; "" for built-in tasks
  std::string messages_json;  // the prompt as a JSON list of chat messages (AReaL's `messages`), else ""
};

bool is_builtin_task(const std::string& path);

// The examples of `path`; throws ConfigError naming the known tasks otherwise.
std::vector<PromptExample> builtin_task(const std::string& path);

}  // namespace areal
