#include "areal/rl/reward.h"

#include <cctype>
#include <cmath>
#include <regex>

#include "areal/util/error.h"
#include "areal/util/log.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

// The contents of the last \boxed{...}, with nested braces balanced.
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

std::optional<double> parse_plain(std::string s) {
  std::string cleaned;
  for (char c : s)
    if (c != ',' && c != '$' && !std::isspace(static_cast<unsigned char>(c))) cleaned.push_back(c);
  while (!cleaned.empty() && cleaned.back() == '.') cleaned.pop_back();  // "42." at a sentence's end
  static const std::regex number(R"(^[+-]?(\d+(\.\d*)?|\.\d+)$)");
  if (!std::regex_match(cleaned, number)) return std::nullopt;
  return std::stod(cleaned);
}

}  // namespace

std::optional<double> parse_math_number(const std::string& raw) {
  std::string text = trim(raw);
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
  throw ConfigError(cat("reward function '", name, "' is unknown (exact_match, math)"));
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

}  // namespace areal
