#include "areal/reward/environment.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <nlohmann/json.hpp>

#include "areal/reward/reward.h"
#include "areal/reward/worker_pool.h"
#include "areal/util/error.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

using json = nlohmann::json;

// AReaL's multi-turn math workflow's message after a wrong answer.
constexpr const char* kTryAgain =
    "Your answer is either wrong or not parsable to the reward function. You may misunderstand the original "
    "question. Please carefully read the original question, check the previous errors, and try to answer it again.";

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The built-ins answer when polled: a step's turns are scored together (one batch for a
// reward command's workers).
class BuiltinEnvironment : public Environment {
 public:
  BuiltinEnvironment(bool calculator, Rewarder& reward) : calculator_(calculator), reward_(reward) {}

  void submit(EnvTurn turn) override { turns_.push_back({std::move(turn), now_seconds()}); }

  std::vector<EnvReply> poll(double) override {
    std::vector<EnvReply> replies;
    std::vector<RewardCall> calls;
    std::vector<size_t> scored;  // the replies that wait for a reward
    for (const auto& [turn, submitted] : turns_) {
      EnvReply& r = replies.emplace_back();
      r.episode = turn.episode;
      r.seconds = now_seconds() - submitted;
      if (calculator_ && !turn.final) {
        if (const std::optional<std::string> expression = calculator_call(turn.last)) {
          const std::optional<double> value = evaluate_arithmetic(*expression);
          r.role = "tool";
          r.message = value ? calculator_value(*value) : "error: not an arithmetic expression";
          continue;
        }
      }
      r.done = true;  // scored below; multi-turn math asks again while the score is 0
      calls.push_back({turn.example, turn.last, {}, {}});
      scored.push_back(replies.size() - 1);
    }
    int64_t failures = 0;
    const std::vector<double> rewards = calls.empty() ? std::vector<double>{} : reward_.score(calls, failures);
    for (size_t k = 0; k < scored.size(); ++k) {
      EnvReply& r = replies[scored[k]];
      r.reward = rewards[k];
      if (!calculator_ && r.reward <= 0 && !turns_[scored[k]].first.final) {
        r.done = false;
        r.role = "user";
        r.message = kTryAgain;
      }
    }
    turns_.clear();
    return replies;
  }

 private:
  bool calculator_;
  Rewarder& reward_;
  std::vector<std::pair<EnvTurn, double>> turns_;
};

class CommandEnvironment : public Environment {
 public:
  CommandEnvironment(const std::string& command, int64_t workers, double timeout_seconds)
      : pool_("environment", command, workers, timeout_seconds,
              [](const std::string& line) { return parse_env_reply(line).has_value(); }) {
    try {
      pool_.check_running(0.5);
    } catch (const std::runtime_error& e) {
      throw ConfigError(cat("option 'env': ", e.what()));
    }
  }

  void submit(EnvTurn turn) override { pool_.submit(turn.episode, env_request_json(turn)); }

  std::vector<EnvReply> poll(double wait_seconds) override {
    std::vector<EnvReply> replies;
    for (WorkerPool::Reply& r : pool_.poll(wait_seconds)) {
      EnvReply reply;
      if (r.line) reply = *parse_env_reply(*r.line);
      reply.failed = !r.line;
      reply.done = reply.done || reply.failed;
      reply.episode = r.tag;
      reply.seconds = r.seconds;
      replies.push_back(std::move(reply));
    }
    return replies;
  }

 private:
  WorkerPool pool_;
};

// A recursive-descent parser over the expression's characters.
class Arithmetic {
 public:
  explicit Arithmetic(const std::string& text) : s_(text) {}
  std::optional<double> parse() {
    std::optional<double> v = sum();
    skip_space();
    if (!v || at_ != s_.size()) return std::nullopt;
    return v;
  }

 private:
  void skip_space() {
    while (at_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[at_]))) ++at_;
  }
  bool take(char c) {
    skip_space();
    if (at_ < s_.size() && s_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  std::optional<double> sum() {
    std::optional<double> v = product();
    while (v) {
      if (take('+')) {
        const auto r = product();
        v = r ? std::optional<double>(*v + *r) : std::nullopt;
      } else if (take('-')) {
        const auto r = product();
        v = r ? std::optional<double>(*v - *r) : std::nullopt;
      } else {
        break;
      }
    }
    return v;
  }
  std::optional<double> product() {
    std::optional<double> v = unary();
    while (v) {
      const char op = (take('*') ? '*' : take('/') ? '/' : take('%') ? '%' : 0);
      if (!op) break;
      const auto r = unary();
      if (!r || (op != '*' && *r == 0)) return std::nullopt;  // no division by zero
      v = op == '*' ? *v * *r : op == '/' ? *v / *r : std::fmod(*v, *r);
    }
    return v;
  }
  std::optional<double> unary() {
    if (++depth_ > 64) return std::nullopt;  // bounded nesting: model text can be anything
    std::optional<double> v;
    if (take('-')) {
      v = unary();
      if (v) v = -*v;
    } else if (take('+')) {
      v = unary();
    } else if (take('(')) {
      v = sum();
      if (v && !take(')')) v = std::nullopt;
    } else {
      v = number();
    }
    --depth_;
    return v;
  }
  std::optional<double> number() {
    skip_space();
    const size_t start = at_;
    while (at_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[at_])) || s_[at_] == '.')) ++at_;
    const std::string digits = s_.substr(start, at_ - start);
    if (digits.empty() || digits == "." || std::count(digits.begin(), digits.end(), '.') > 1) return std::nullopt;
    return std::stod(digits);
  }

  const std::string& s_;
  size_t at_ = 0;
  int depth_ = 0;
};

}  // namespace

std::optional<double> evaluate_arithmetic(const std::string& expression) {
  if (expression.size() > 1000) return std::nullopt;
  const std::optional<double> v = Arithmetic(expression).parse();
  if (!v || !std::isfinite(*v)) return std::nullopt;
  return v;
}

std::optional<std::string> calculator_call(const std::string& turn) {
  const std::string text = trim(turn);
  const std::string close = "</calc>";
  if (text.size() < close.size() || text.compare(text.size() - close.size(), close.size(), close) != 0)
    return std::nullopt;
  const size_t open = text.rfind("<calc>");
  if (open == std::string::npos) return std::nullopt;
  return text.substr(open + 6, text.size() - close.size() - open - 6);
}

std::string calculator_value(double value) {
  if (std::fabs(value) < 1e15 && value == std::floor(value)) return std::to_string(static_cast<int64_t>(value));
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.10g", value);
  return buffer;
}

std::string env_request_json(const EnvTurn& turn) {
  json request;
  request["messages"] = json::parse(turn.messages_json);
  request["last"] = turn.last;
  request["turn"] = turn.turn;
  request["final"] = turn.final;
  request["row"] = turn.example->row_json.empty() ? json{{"answer", turn.example->answer}}
                                                  : json::parse(turn.example->row_json);
  // Invalid UTF-8 (a model can emit any bytes) is replaced, not an error.
  return request.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::optional<EnvReply> parse_env_reply(const std::string& line) {
  const json j = json::parse(line, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  EnvReply r;
  if (j.contains("done") && j["done"].is_boolean() && j["done"].get<bool>()) {
    if (!j.contains("reward") || !j["reward"].is_number()) return std::nullopt;
    r.done = true;
    r.reward = j["reward"].get<double>();
    if (!std::isfinite(r.reward)) return std::nullopt;
    return r;
  }
  if (!j.contains("message") || !j["message"].is_string()) return std::nullopt;
  r.message = j["message"].get<std::string>();
  r.role = j.value("role", std::string("user"));
  if (r.role != "user" && r.role != "tool") return std::nullopt;
  return r;
}

std::unique_ptr<Environment> make_environment(const std::string& env, Rewarder& reward, int64_t workers,
                                              double timeout_seconds) {
  if (env.empty() || env == "builtin:multi_turn_math") return std::make_unique<BuiltinEnvironment>(false, reward);
  if (env == "builtin:calculator") return std::make_unique<BuiltinEnvironment>(true, reward);
  const std::string prefix = "command:";
  if (env.rfind(prefix, 0) == 0) {
    const std::string command = trim(env.substr(prefix.size()));
    if (command.empty()) throw ConfigError("option 'env' = 'command:' names no command");
    return std::make_unique<CommandEnvironment>(command, workers, timeout_seconds);
  }
  throw ConfigError(cat("option 'env' = '", env, "' is not an environment: builtin:multi_turn_math, "
                        "builtin:calculator or command:<shell command>"));
}

}  // namespace areal
