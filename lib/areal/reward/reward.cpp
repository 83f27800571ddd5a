#include "areal/reward/reward.h"

#include <cerrno>
#include <cstdlib>
#include <cmath>
#include <nlohmann/json.hpp>

#include "areal/reward/worker_pool.h"
#include "areal/util/error.h"
#include "areal/util/log.h"
#include "areal/util/strings.h"

namespace areal {

namespace {

// A reward command's reply: one finite number, nothing else.
std::optional<double> reward_reply(const std::string& line) {
  const std::string text = trim(line);
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

}  // namespace

RewardFn reward_function(const std::string& name) {
  if (name == "exact_match")
    return [](const std::string& answer, const std::string& reference) {
      return trim(answer) == trim(reference) ? 1.0 : 0.0;
    };
  if (name == "math")
    return [](const std::string& answer, const std::string& reference) {
      auto extracted = extract_math_answer(answer);
      auto expected = extract_math_answer(reference).value_or(reference);
      return extracted && math_answers_equal(*extracted, expected) ? 1.0 : 0.0;
    };
  throw ConfigError(cat("reward function '", name, "' is unknown (exact_match, math, command:<shell command>)"));
}

double reward_or_zero(const RewardFn& reward, const std::string& answer, const std::string& reference,
                      int64_t& failures) {
  try {
    return reward(answer, reference);
  } catch (const std::exception& e) {
    if (failures++ == 0) log::warn(cat("the reward function failed on an answer (scored 0): ", e.what()));
    return 0.0;
  }
}

std::string reward_request_json(const RewardCall& call) {
  nlohmann::json request = call.example->row_json.empty() ? nlohmann::json{{"answer", call.example->answer}}
                                                          : nlohmann::json::parse(call.example->row_json);
  request["prompt"] = call.example->prompt;
  request["completions"] = call.answer;
  request["prompt_ids"] = call.prompt_ids;
  request["completion_ids"] = call.answer_ids;
  // Invalid UTF-8 (a model can emit any bytes) is replaced, not an error.
  return request.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Rewarder::Rewarder(const std::string& reward_fn, int64_t workers, double timeout_seconds) {
  const std::string prefix = "command:";
  if (reward_fn.rfind(prefix, 0) == 0) {
    const std::string command = trim(reward_fn.substr(prefix.size()));
    if (command.empty()) throw ConfigError("option 'reward_fn' = 'command:' names no command");
    workers_ = std::make_unique<WorkerPool>("reward command", command, workers, timeout_seconds,
                                            [](const std::string& line) { return reward_reply(line).has_value(); });
    try {
      workers_->check_running(0.5);
    } catch (const std::runtime_error& e) {
      throw ConfigError(cat("option 'reward_fn': ", e.what()));
    }
  } else {
    builtin_ = reward_function(reward_fn);
  }
}

Rewarder::~Rewarder() = default;

std::vector<double> Rewarder::score(const std::vector<RewardCall>& calls, int64_t& failures) {
  if (workers_) {
    std::vector<std::string> requests;
    for (const RewardCall& call : calls) requests.push_back(reward_request_json(call));
    std::vector<double> rewards;
    for (const std::optional<std::string>& reply : workers_->call_all(requests)) {
      failures += !reply;
      rewards.push_back(reply ? *reward_reply(*reply) : 0.0);  // a failed call scores 0
    }
    return rewards;
  }
  std::vector<double> rewards;
  for (const RewardCall& call : calls)
    rewards.push_back(reward_or_zero(builtin_, call.answer, call.example->answer, failures));
  return rewards;
}

}  // namespace areal
