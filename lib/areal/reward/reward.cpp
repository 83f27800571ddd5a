#include "areal/reward/reward.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>

#include "areal/reward/worker_pool.h"
#include "areal/util/error.h"
#include "areal/util/log.h"
#include "areal/util/strings.h"

namespace areal {

std::optional<std::string> last_boxed(const std::string& text) {
  size_t at = text.rfind("\\boxed{");
  if (at == std::string::npos) return std::nullopt;
  size_t start = at + 7, depth = 1;
  for (size_t i = start; i < text.size(); ++i) {
    if (text[i] == '{') ++depth;
    if (text[i] == '}' && --depth == 0) return text.substr(start, i - start);
  }
  return std::nullopt;  // unbalanced
}

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

std::optional<double> parse_plain(std::string s) {
  std::string cleaned;
  for (char c : s)
    if (c != ',' && c != '$' && !std::isspace(static_cast<unsigned char>(c))) cleaned.push_back(c);
  while (!cleaned.empty() && cleaned.back() == '.') cleaned.pop_back();  // "42." at a sentence's end
  static const std::regex number(R"(^[+-]?(\d+(\.\d*)?|\.\d+)$)");
  if (!std::regex_match(cleaned, number)) return std::nullopt;
  return std::stod(cleaned);
}

// A final answer without what it carries besides its value: text units
// ("\text{ cm}"), LaTeX's thousands separator "{,}", spacing commands, and a single
// variable's "x =" in front (math-verify reads these the same way).
std::string strip_decorations(const std::string& raw) {
  static const std::regex text_units(R"(\\(text|mbox|mathrm)\{[^{}]*\})");
  static const std::regex spacing(R"(\\[!,;: ])");
  static const std::regex variable(R"(^\s*[A-Za-z]\s*=\s*)");
  std::string text = std::regex_replace(raw, text_units, "");
  text = std::regex_replace(text, spacing, "");
  for (size_t at; (at = text.find("{,}")) != std::string::npos;) text.replace(at, 3, ",");
  return trim(std::regex_replace(text, variable, ""));
}

}  // namespace

std::optional<double> parse_math_number(const std::string& raw) {
  std::string text = strip_decorations(raw);
  static const std::regex frac(R"(^(-?)\\d?frac\{([^{}]+)\}\{([^{}]+)\}$)");
  std::smatch m;
  std::string numerator, denominator, sign;
  if (std::regex_match(text, m, frac)) {
    sign = m[1];
    numerator = m[2];
    denominator = m[3];
  } else if (size_t slash = text.find('/'); slash != std::string::npos) {
    numerator = text.substr(0, slash);
    denominator = text.substr(slash + 1);
  } else {
    return parse_plain(text);
  }
  auto n = parse_plain(numerator), d = parse_plain(denominator);
  if (!n || !d || *d == 0) return std::nullopt;
  return (sign == "-" ? -1.0 : 1.0) * *n / *d;
}

std::optional<std::string> extract_math_answer(const std::string& text) {
  if (auto boxed = last_boxed(text)) return trim(*boxed);
  if (size_t hashes = text.rfind("####"); hashes != std::string::npos) return trim(text.substr(hashes + 4));
  static const std::regex number(R"(-?\d[\d,]*(\.\d+)?(/\d+)?)");
  std::optional<std::string> last;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), number); it != std::sregex_iterator(); ++it)
    last = it->str();
  return last;
}

bool math_answers_equal(const std::string& a, const std::string& b) {
  auto x = parse_math_number(a), y = parse_math_number(b);
  if (x && y) return std::abs(*x - *y) <= 1e-9 * std::max({1.0, std::abs(*x), std::abs(*y)});
  return trim(a) == trim(b);  // not numbers: compare as written
}

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
