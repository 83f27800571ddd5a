// Verifiable rewards: 1 for a correct answer, 0 otherwise.
//   exact_match  the answer equals the reference after trimming whitespace
//   math         the final answer of a math solution (the last \boxed{...}, else what
//                follows "####" as in GSM8K, else the last number) equals the
//                reference numerically: "0.5" = "1/2" = "\frac{1}{2}", "1,000" = "1000"
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace areal {

using RewardFn = std::function<double(const std::string& answer, const std::string& reference)>;

// The reward function named `name`; throws ConfigError naming the choices otherwise.
RewardFn reward_function(const std::string& name);

// reward(answer, reference), or 0 when the function throws; `failures` counts those,
// and the first one is logged as a warning.
double reward_or_zero(const RewardFn& reward, const std::string& answer, const std::string& reference,
                      int64_t& failures);

// The final answer of a solution text, or nothing when it has none.
std::optional<std::string> extract_math_answer(const std::string& text);

// The value of a number as written in answers: "1,000", "-2.5", "$3", "3/4",
// "\frac{3}{4}", "\dfrac{3}{4}"; nothing for anything else.
std::optional<double> parse_math_number(const std::string& text);

bool math_answers_equal(const std::string& a, const std::string& b);

}  // namespace areal
