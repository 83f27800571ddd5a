// Verifiable rewards: answer extraction and numeric equality, case by case.
#include <catch2/catch.hpp>

#include "areal/rl/reward.h"
#include "areal/util/error.h"

using namespace areal;

TEST_CASE("math answers are extracted from boxes, GSM8K markers or the last number", "[reward]") {
  CHECK(extract_math_answer("so x = 3, hence \\boxed{\\frac{1}{2}}.") == std::optional<std::string>("\\frac{1}{2}"));
  CHECK(extract_math_answer("\\boxed{1} then \\boxed{ 2 }") == std::optional<std::string>("2"));
  CHECK(extract_math_answer("She pays 5 + 7 = 12 dollars.\n#### 12") == std::optional<std::string>("12"));
  CHECK(extract_math_answer("It costs 1,250.50 in total, up from 900.") == std::optional<std::string>("900"));
  CHECK(extract_math_answer("the result is -3/4") == std::optional<std::string>("-3/4"));
  CHECK_FALSE(extract_math_answer("no digits here").has_value());
  CHECK_FALSE(extract_math_answer("\\boxed{unbalanced").has_value());  // no closing brace, no number
}

TEST_CASE("numbers are equal by value, whatever their spelling", "[reward]") {
  CHECK(math_answers_equal("0.5", "1/2"));
  CHECK(math_answers_equal("\\frac{1}{2}", "0.50"));
  CHECK(math_answers_equal("\\dfrac{3}{4}", "3/4"));
  CHECK(math_answers_equal("1,000", "1000"));
  CHECK(math_answers_equal("$42", "42."));
  CHECK(math_answers_equal("-2.5", "-5/2"));
  CHECK_FALSE(math_answers_equal("3", "4"));
  CHECK_FALSE(math_answers_equal("1/3", "0.33"));
  CHECK_FALSE(math_answers_equal("1/0", "0"));
  CHECK(math_answers_equal("x+1", " x+1 "));  // not numbers: compared as written
  CHECK(parse_math_number("12,345.5") == std::optional<double>(12345.5));
  CHECK_FALSE(parse_math_number("12a").has_value());
}

TEST_CASE("reward functions by name", "[reward]") {
  RewardFn math = reward_function("math");
  CHECK(math("Adding up gives \\boxed{0.5}", "#### 1/2") == 1.0);
  CHECK(math("The answer is 1,000", "1000") == 1.0);
  CHECK(math("The answer is 999", "1000") == 0.0);
  CHECK(math("I do not know", "7") == 0.0);
  RewardFn exact = reward_function("exact_match");
  CHECK(exact(" 58\n", "58") == 1.0);
  CHECK(exact("57", "58") == 0.0);
  CHECK_THROWS_AS(reward_function("bleu"), ConfigError);
  CHECK_THROWS_WITH(reward_function("bleu"), Catch::Matchers::Contains("exact_match, math"));
}

TEST_CASE("a reward function that throws scores that answer 0 and is counted", "[reward]") {
  RewardFn picky = [](const std::string& answer, const std::string&) -> double {
    if (answer == "boom") throw std::runtime_error("cannot parse");
    return 1.0;
  };
  int64_t failures = 0;
  CHECK(reward_or_zero(picky, "42", "42", failures) == 1.0);
  CHECK(reward_or_zero(picky, "boom", "42", failures) == 0.0);
  CHECK(reward_or_zero(picky, "boom", "42", failures) == 0.0);
  CHECK(failures == 2);
}
