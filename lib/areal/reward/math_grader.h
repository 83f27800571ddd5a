// The built-in `math` reward's grader: a solution's final answer, and whether two
// answers are the same as Hugging Face math-verify judges them (checked against it on
// two corpora, tests/test_reward.cpp): numbers by value however written (1,000 / 1{,}000
// / \$1,\!000; 0.5 / \frac{1}{2} / 1/2; 4\frac{2}{3}; 5\% also as 0.05), closed forms of
// numbers by value (2\sqrt{5} = \sqrt{20}, 3\pi, 2^{10}), tuples and intervals element by
// element with their brackets, lists and sets in any order, anything else as written
// without spaces, \left / \right, units, degrees and a single variable's "x =".
#pragma once

#include <optional>
#include <string>

namespace areal {

// The contents of the last \boxed{...} of `text` (nested braces balanced), if any.
std::optional<std::string> last_boxed(const std::string& text);

// The final answer of a solution text: the last \boxed{}, else what follows the last
// "####", else the last number; nothing when it has none.
std::optional<std::string> extract_math_answer(const std::string& text);

// The value of an answer that is a number or a closed form of numbers ("1,000", "-2.5",
// "$3", "3/4", "\dfrac{3}{4}", "2\sqrt{5}", "\frac{\pi}{2}", "2^{10}"); a percent
// reads as its number ("5\%": 5); nothing for anything else (variables, lists).
std::optional<double> parse_math_number(const std::string& text);

bool math_answers_equal(const std::string& a, const std::string& b);

}  // namespace areal
